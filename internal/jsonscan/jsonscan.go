// Package jsonscan reads the pieces of JSON texts that the hot paths
// check without encoding/json's scanner: numbers, by the grammar of RFC
// 8259 (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?).
package jsonscan

// NumberLen returns the length of the JSON number at the start of s, 0
// when s does not start with one.
func NumberLen[T string | []byte](s T) int {
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
func IsNumber[T string | []byte](s T) bool {
	n := NumberLen(s)
	return n > 0 && n == len(s)
}
