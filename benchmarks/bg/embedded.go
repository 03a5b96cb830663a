package bg

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// The embedded conn's reads (NewEmbeddedConn) take the fields an action
// shows as their JSON texts (DB.GetValues): a near-cache hit hands over the
// copy's own strings, and the application decodes what it uses — the
// profile's strings, a list's first ids, a list's length — as the database
// policies scan the selected columns and cardinalities PostgreSQL sends.

// profileOf decodes a profile from the texts of ProfileFields, in order.
func profileOf(id string, vals []string) (*profileDoc, error) {
	if len(vals) < len(ProfileFields) {
		return nil, fmt.Errorf("bg: %s: %d profile fields, want %d", id, len(vals), len(ProfileFields))
	}
	var d profileDoc
	for i, p := range []*string{&d.Username, &d.PW, &d.FirstName, &d.LastName, &d.Gender, &d.DOB, &d.JDate, &d.LDate, &d.Address, &d.Email, &d.Tel, &d.About} {
		s, err := unquote(vals[i])
		if err != nil {
			return nil, fmt.Errorf("bg: decoding %s's %s: %w", id, ProfileFields[i], err)
		}
		*p = s
	}
	return &d, d.checkProfile(id)
}

// unquote decodes a JSON string's text; "" (no such field) and null are
// the empty string. Without escapes it is the text between the quotes, no
// copy.
func unquote(s string) (string, error) {
	switch {
	case s == "" || s == "null":
		return "", nil
	case len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' && !strings.ContainsRune(s, '\\'):
		return s[1 : len(s)-1], nil
	}
	var v string
	err := json.Unmarshal([]byte(s), &v)
	return v, err
}

// firstIDs decodes the first n strings of a JSON array of strings (a
// member's list) and counts its elements. Without escapes it scans the text
// itself, as ids are plain; else it decodes the whole array.
func firstIDs(s string, n int) ([]string, int, error) {
	if s == "" || s == "null" {
		return nil, 0, nil
	}
	if strings.ContainsRune(s, '\\') {
		var all []string
		if err := json.Unmarshal([]byte(s), &all); err != nil {
			return nil, 0, err
		}
		return all[:min(n, len(all))], len(all), nil
	}
	count, err := countElems(s)
	if err != nil {
		return nil, 0, err
	}
	out := make([]string, 0, min(n, count))
	for i := 0; len(out) < n && i < len(s); i++ {
		if s[i] != '"' {
			continue
		}
		j := strings.IndexByte(s[i+1:], '"')
		if j < 0 {
			return nil, 0, fmt.Errorf("bg: an unterminated string in a list: %.20s", s[i:])
		}
		out = append(out, s[i+1:i+1+j])
		i += j + 1
	}
	return out, count, nil
}

// countElems counts a JSON array's elements: the commas at its top level,
// outside strings, plus one unless it is empty; null is 0. The text is
// valid JSON (the near cache holds canonical JSON).
func countElems[T string | []byte](b T) (int, error) {
	if string(b) == "null" || len(b) == 0 {
		return 0, nil
	}
	if len(b) < 2 || b[0] != '[' {
		return 0, fmt.Errorf("bg: a list is not a JSON array: %.20s", string(b))
	}
	depth, inStr, esc, commas, empty := 0, false, false, 0, true
	for i := 1; i < len(b)-1; i++ {
		switch c := b[i]; {
		case esc:
			esc = false
		case inStr:
			switch c {
			case '\\':
				esc = true
			case '"':
				inStr = false
			}
		case c == '"':
			inStr, empty = true, false
		case c == '[' || c == '{':
			depth, empty = depth+1, false
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			commas++
		case c != ' ' && c != '\t' && c != '\n' && c != '\r':
			empty = false
		}
	}
	if empty {
		return 0, nil
	}
	return commas + 1, nil
}

// embeddedProfile is Profile through an embedded member.
func (c *sidecarConn) embeddedProfile(ctx context.Context, m int32) (int, int, error) {
	id := ID(m)
	vals, err := c.proj.GetValues(ctx, c.coll, id, countedFields...)
	if err != nil {
		return 0, 0, fmt.Errorf("bg: reading %s: %w", id, err)
	}
	if _, err := profileOf(id, vals); err != nil {
		return 0, 0, err
	}
	np := len(ProfileFields)
	friends, err := countElems(vals[np])
	if err != nil {
		return 0, 0, fmt.Errorf("bg: %s's friends: %w", id, err)
	}
	pending, err := countElems(vals[np+1])
	if err != nil {
		return 0, 0, fmt.Errorf("bg: %s's pending: %w", id, err)
	}
	return friends, pending, nil
}

// embeddedList is List through an embedded member: the member's list
// alone, then the profiles it shows in one GetManyValues.
func (c *sidecarConn) embeddedList(ctx context.Context, m int32, l List, n int) (int, []int32, error) {
	id := ID(m)
	vals, err := c.proj.GetValues(ctx, c.coll, id, l.String())
	if err != nil {
		return 0, nil, fmt.Errorf("bg: reading %s: %w", id, err)
	}
	first, count, err := firstIDs(vals[0], n)
	if err != nil {
		return 0, nil, fmt.Errorf("bg: %s's %s: %w", id, l, err)
	}
	shown, err := parseIDs(first)
	if err != nil || len(shown) == 0 {
		return count, shown, err
	}
	docs, err := c.proj.GetManyValues(ctx, c.coll, first, ProfileFields...)
	if err != nil {
		return 0, nil, fmt.Errorf("bg: reading %d profiles: %w", len(first), err)
	}
	for i, vals := range docs {
		if vals == nil {
			return 0, nil, fmt.Errorf("bg: the profile %s does not exist", first[i])
		}
		if _, err := profileOf(first[i], vals); err != nil {
			return 0, nil, err
		}
	}
	return count, shown, nil
}
