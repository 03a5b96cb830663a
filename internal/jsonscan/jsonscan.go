// Package jsonscan finds and checks the pieces of compact JSON texts —
// values, strings, numbers — that the hot paths read without
// encoding/json's scanner, by the grammar of RFC 8259: what it accepts,
// encoding/json accepts (every text here has no whitespace, as
// json.Marshal writes it; with whitespace, callers go to encoding/json).
package jsonscan

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting ValueEnd follows.
const MaxDepth = 64

// ValueEnd returns the end of the JSON value starting at s[i], which has
// no whitespace around or inside it (outside its strings), and whether
// there is one (nested no deeper than MaxDepth).
func ValueEnd[T ~string | ~[]byte](s T, i int) (int, bool) {
	return valueEnd(s, i, 0)
}

func valueEnd[T ~string | ~[]byte](s T, i, depth int) (int, bool) {
	if i >= len(s) || depth > MaxDepth {
		return 0, false
	}
	switch c := s[i]; {
	case c == '"':
		end, _, ok := StringEnd(s, i)
		return end, ok
	case c == '[' || c == '{':
		closer := byte(']')
		if c == '{' {
			closer = '}'
		}
		i++
		if i < len(s) && s[i] == closer {
			return i + 1, true
		}
		for {
			if c == '{' {
				end, _, ok := StringEnd(s, i)
				if !ok || end >= len(s) || s[end] != ':' {
					return 0, false
				}
				i = end + 1
			}
			end, ok := valueEnd(s, i, depth+1)
			if !ok || end >= len(s) {
				return 0, false
			}
			i = end + 1
			switch s[end] {
			case ',':
			case closer:
				return i, true
			default:
				return 0, false
			}
		}
	case c == 't':
		return literalEnd(s, i, "true")
	case c == 'f':
		return literalEnd(s, i, "false")
	case c == 'n':
		return literalEnd(s, i, "null")
	}
	if n := NumberLen(s[i:]); n > 0 {
		return i + n, true
	}
	return 0, false
}

func literalEnd[T ~string | ~[]byte](s T, i int, lit string) (int, bool) {
	if len(s)-i < len(lit) || string(s[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// StringEnd returns the end of the JSON string starting at s[i] (just
// past its closing quote) and whether it holds escapes. It accepts only
// what JSON does: no control characters, and only JSON's escapes.
func StringEnd[T ~string | ~[]byte](s T, i int) (end int, escaped, ok bool) {
	if i >= len(s) || s[i] != '"' {
		return 0, false, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return j + 1, escaped, true
		case c == '\\':
			escaped = true
			j++
			if j >= len(s) {
				return 0, false, false
			}
			switch s[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(s) {
					return 0, false, false
				}
				for k := j + 1; k <= j+4; k++ {
					if !isHex(s[k]) {
						return 0, false, false
					}
				}
				j += 4
			default:
				return 0, false, false
			}
		case c < 0x20:
			return 0, false, false
		}
	}
	return 0, false, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// NumberLen returns the length of the JSON number at the start of s, 0
// when s does not start with one.
func NumberLen[T ~string | ~[]byte](s T) int {
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return 0
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return 0
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0
		}
	}
	return i
}

// IsNumber reports whether s is one JSON number.
func IsNumber[T ~string | ~[]byte](s T) bool {
	n := NumberLen(s)
	return n > 0 && n == len(s)
}

// Unquote returns the string the JSON string literal s holds, decoded as
// encoding/json decodes it (escapes, surrogate pairs; a lone surrogate or
// a byte of invalid UTF-8 becomes U+FFFD), and whether s is one JSON
// string.
func Unquote(s string) (string, bool) {
	if end, escaped, ok := StringEnd(s, 0); !ok || end != len(s) {
		return "", false
	} else if !escaped && utf8.ValidString(s) {
		return s[1 : len(s)-1], true
	}
	b := make([]byte, 0, len(s))
	for i := 1; i < len(s)-1; {
		switch c := s[i]; {
		case c == '\\':
			switch s[i+1] {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := hex4(s[i+2 : i+6])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(s)-1 && s[i] == '\\' && s[i+1] == 'u' {
						if dec := utf16.DecodeRune(r, hex4(s[i+2:i+6])); dec != unicode.ReplacementChar {
							r = dec
							i += 6
						} else {
							r = unicode.ReplacementChar
						}
					} else {
						r = unicode.ReplacementChar
					}
				}
				b = utf8.AppendRune(b, r)
				continue
			default: // '"', '\\', '/'
				b = append(b, s[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i : len(s)-1])
			b = utf8.AppendRune(b, r) // RuneError for invalid UTF-8, as encoding/json
			i += size
		}
	}
	return string(b), true
}

// hex4 is the value of four hex digits (checked by StringEnd).
func hex4(h string) rune {
	var r rune
	for i := range 4 {
		c := h[i]
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
