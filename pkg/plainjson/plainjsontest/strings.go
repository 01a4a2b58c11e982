package plainjsontest

import "sigs.k8s.io/randfill"

// TrickyStrings are the strings whose JSON encoding has rules: HTML
// escaping, control characters, the JavaScript line separators, invalid
// UTF-8, multi-byte runes, and printable ASCII that needs no escape.
func TrickyStrings() []string {
	return []string{
		"", "plain", "<script>&amp;</script>", "quote\" backslash\\ slash/", "\x00\x01\x1f\x7f", "\b\f\n\r\t",
		"\u2028\u2029", "\xff\xfe invalid", "héllo wörld ☃ 𝄞", "a\u0000b", "~ !#$%'()*+,-./:;=?@[]^_`{|}",
	}
}

// FillString is a randfill function for strings: one of TrickyStrings a
// third of the time, otherwise any runes.
func FillString(s *string, c randfill.Continue) {
	if c.Intn(3) == 0 {
		tricky := TrickyStrings()
		*s = tricky[c.Intn(len(tricky))]
		return
	}
	*s = c.String(12)
}
