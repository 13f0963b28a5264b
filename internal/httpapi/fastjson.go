package httpapi

import (
	"strconv"
	"unicode/utf8"

	"github.com/seckill-lab/seckill/internal/api"
)

// Most of a flash crowd's answers are refusals, and most of its bodies are
// the same small buy. These two paths spare them encoding/json's
// reflection; each produces exactly what encoding/json would, and the
// tests hold them to it (fastjson_test.go).

// appendProblem appends p as jsonEncode writes it: the fields in the
// struct's order, detail and instance left out when empty, strings escaped
// as encoding/json escapes them without HTML escaping, and a newline.
func appendProblem(dst []byte, p api.Problem) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendJSONString(dst, p.Type)
	dst = append(dst, `,"title":`...)
	dst = appendJSONString(dst, p.Title)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(p.Status), 10)
	if p.Detail != "" {
		dst = append(dst, `,"detail":`...)
		dst = appendJSONString(dst, p.Detail)
	}
	if p.Instance != "" {
		dst = append(dst, `,"instance":`...)
		dst = appendJSONString(dst, p.Instance)
	}
	return append(dst, "}\n"...)
}

// appendJSONString appends s quoted as encoding/json quotes a string with
// HTML escaping off: the short escapes it uses, \u00XX for the other
// control characters, \ufffd for each byte of invalid UTF-8, and \u2028
// and \u2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// plainBuy reads the common buy body, {"user_id":"…","quantity":N} with
// the fields in either order and quantity optional, without reflection. It
// answers ok only for a strict subset of what decodeBody accepts, and then
// with what decodeBody would have read: the keys written exactly, each
// once; the user id printable ASCII with no escape; the quantity a JSON
// integer of at most nine digits; whitespace only where JSON allows it.
// Anything else (ok false) goes to decodeBody, which also says what is
// wrong with it.
func plainBuy(body []byte) (b buyBody, ok bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return buyBody{}, false
	}
	i = skipSpace(body, i+1)
	for {
		var key []byte
		if key, i, ok = plainString(body, i); !ok {
			return buyBody{}, false
		}
		if i = skipSpace(body, i); i >= len(body) || body[i] != ':' {
			return buyBody{}, false
		}
		i = skipSpace(body, i+1)
		switch string(key) {
		case "user_id":
			var v []byte
			if b.UserID != nil {
				return buyBody{}, false
			}
			if v, i, ok = plainString(body, i); !ok {
				return buyBody{}, false
			}
			s := string(v)
			b.UserID = &s
		case "quantity":
			var n int
			if b.Quantity != nil {
				return buyBody{}, false
			}
			if n, i, ok = plainInt(body, i); !ok {
				return buyBody{}, false
			}
			b.Quantity = &n
		default:
			return buyBody{}, false
		}
		if i = skipSpace(body, i); i < len(body) && body[i] == ',' {
			i = skipSpace(body, i+1)
			if i < len(body) && body[i] == '}' {
				return buyBody{}, false // a trailing comma
			}
			continue
		}
		if i >= len(body) || body[i] != '}' {
			return buyBody{}, false
		}
		break
	}
	if skipSpace(body, i+1) != len(body) {
		return buyBody{}, false
	}
	return b, true
}

// skipSpace skips JSON whitespace from i.
func skipSpace(s []byte, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a string at i made of printable ASCII with no escape,
// and returns its contents and the index after its closing quote.
func plainString(s []byte, i int) ([]byte, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return s[i+1 : j], j + 1, true
		case c < 0x20 || c >= 0x7F || c == '\\':
			return nil, i, false
		}
	}
	return nil, i, false
}

// plainInt reads a JSON integer of one to nine digits at i (no fraction,
// exponent or leading zero), so that it fits any int.
func plainInt(s []byte, i int) (int, int, bool) {
	j, neg := i, false
	if j < len(s) && s[j] == '-' {
		neg, j = true, j+1
	}
	start, n := j, 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		n = n*10 + int(s[j]-'0')
		j++
	}
	digits := j - start
	if digits == 0 || digits > 9 || (s[start] == '0' && digits > 1) {
		return 0, i, false
	}
	if j < len(s) && (s[j] == '.' || s[j] == 'e' || s[j] == 'E') {
		return 0, i, false
	}
	if neg {
		n = -n
	}
	return n, j, true
}
