package mappings

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Pattern is a key (or queue) pattern with named placeholders:
// "account:{branch}:{id}". A placeholder matches one or more characters
// other than ':' and '/', the separators of keys and queues; the literal
// text around placeholders matches itself.
type Pattern struct {
	text  string
	re    *regexp.Regexp
	names []string // in order of appearance
	parts []string // literal text, around the placeholders: len(names)+1
	// scan: every placeholder ends the pattern or is followed by a ':' or
	// '/', so that its value runs to the next one (Match scans for it).
	scan bool
}

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParsePattern parses a pattern. Placeholder names are identifiers and
// appear once each; braces appear only around them.
func ParsePattern(text string) (*Pattern, error) {
	if text == "" {
		return nil, fmt.Errorf("the pattern is empty")
	}
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("pattern %q is not valid UTF-8", text)
	}
	// Keys are bytes, and a byte that is not UTF-8 reads as U+FFFD to the
	// regular expression: a pattern holding U+FFFD would match such a byte
	// or not depending on whether it can be scanned.
	if strings.ContainsRune(text, utf8.RuneError) {
		return nil, fmt.Errorf("pattern %q contains U+FFFD, the replacement character; write the key's own characters", text)
	}
	p := &Pattern{text: text}
	var re strings.Builder
	re.WriteString("^")
	rest := text
	for {
		open := strings.IndexByte(rest, '{')
		if closeAt := strings.IndexByte(rest, '}'); closeAt >= 0 && (open < 0 || closeAt < open) {
			return nil, fmt.Errorf("pattern %q has a '}' without '{'", text)
		}
		if open < 0 {
			p.parts = append(p.parts, rest)
			re.WriteString(regexp.QuoteMeta(rest))
			break
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("pattern %q has a '{' without '}'", text)
		}
		name := rest[open+1 : open+end]
		if !nameRE.MatchString(name) {
			return nil, fmt.Errorf("pattern %q: placeholder {%s} must be a name of letters, digits and '_'", text, name)
		}
		for _, n := range p.names {
			if n == name {
				return nil, fmt.Errorf("pattern %q names {%s} twice", text, name)
			}
		}
		if open == 0 && len(p.names) > 0 {
			return nil, fmt.Errorf("pattern %q: placeholders {%s} and {%s} must be separated by literal text", text, p.names[len(p.names)-1], name)
		}
		p.parts = append(p.parts, rest[:open])
		p.names = append(p.names, name)
		re.WriteString(regexp.QuoteMeta(rest[:open]))
		re.WriteString("([^:/]+)")
		rest = rest[open+end+1:]
	}
	re.WriteString("$")
	p.re = regexp.MustCompile(re.String())
	p.scan = true
	for _, lit := range p.parts[1:] {
		if lit != "" && lit[0] != ':' && lit[0] != '/' {
			p.scan = false
		}
	}
	return p, nil
}

// String is the pattern's text.
func (p *Pattern) String() string { return p.text }

// Names are the placeholders, in order of appearance.
func (p *Pattern) Names() []string { return append([]string(nil), p.names...) }

// Match reports whether s fits the pattern and returns the placeholders'
// values. A placeholder's value is one or more characters other than ':'
// and '/'. A key is matched against every mapping's pattern until one
// fits, so a pattern that can be scanned (most: "order:{w}:{id}") is,
// without the regular expression, whose answers are the same (FuzzMatch).
func (p *Pattern) Match(s string) (Params, bool) {
	if !p.scan {
		return p.matchRE(s)
	}
	rest, ok := strings.CutPrefix(s, p.parts[0])
	if !ok {
		return nil, false
	}
	var at [8]string
	vals := at[:0]
	for _, lit := range p.parts[1:] {
		end := strings.IndexAny(rest, ":/")
		if end < 0 {
			end = len(rest)
		}
		if end == 0 {
			return nil, false
		}
		vals = append(vals, rest[:end])
		if rest, ok = strings.CutPrefix(rest[end:], lit); !ok {
			return nil, false
		}
	}
	if rest != "" {
		return nil, false
	}
	out := make(Params, len(p.names))
	for i, n := range p.names {
		out[n] = vals[i]
	}
	return out, true
}

// matchRE is Match by the regular expression.
func (p *Pattern) matchRE(s string) (Params, bool) {
	m := p.re.FindStringSubmatch(s)
	if m == nil {
		return nil, false
	}
	out := make(Params, len(p.names))
	for i, n := range p.names {
		out[n] = m[i+1]
	}
	return out, true
}

// Render fills the placeholders with params. A missing parameter is an
// error.
func (p *Pattern) Render(params Params) (string, error) {
	var b strings.Builder
	for i, n := range p.names {
		b.WriteString(p.parts[i])
		v, ok := params[n]
		if !ok {
			return "", fmt.Errorf("pattern %q: no value for {%s}", p.text, n)
		}
		b.WriteString(v)
	}
	b.WriteString(p.parts[len(p.names)])
	return b.String(), nil
}
