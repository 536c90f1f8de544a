package codec

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLeaseValueVersion: a lease with a value is written at version 2 (a
// reader of version 1 skips it as newer, rather than misread it); one
// without stays at version 1; a version-1 lease that carries a value is
// malformed, and both decoding paths agree.
func TestLeaseValueVersion(t *testing.T) {
	l := Lease{Member: "node-1", Token: Token{ProducerID: 4, Epoch: 2}, GrantedAt: 1, Deadline: 2000, Value: "10.0.0.7:8080"}
	b, err := EncodeRecord(Record{Lease: &l})
	require.NoError(t, err)
	assert.Equal(t, `{"v":2,"kind":"lease","member":"node-1","producer_id":4,"epoch":2,"granted_at":1,"deadline":2000,"value":"10.0.0.7:8080"}`, string(b))
	r, err := DecodeRecord(b)
	require.NoError(t, err)
	assert.Equal(t, l, *r.Lease)
	r, err = decodeRecordJSON(b)
	require.NoError(t, err)
	assert.Equal(t, l, *r.Lease)

	l.Value = ""
	b, err = EncodeRecord(Record{Lease: &l})
	require.NoError(t, err)
	assert.Contains(t, string(b), `{"v":1,"kind":"lease"`)

	_, err = DecodeRecord([]byte(`{"v":1,"kind":"lease","member":"node-1","producer_id":4,"epoch":2,"granted_at":1,"deadline":2000,"value":"x"}`))
	assert.ErrorIs(t, err, ErrMalformed)
	_, err = DecodeRecord([]byte(`{"v":2,"kind":"registration","member":"node-1","registered_at":1,"value":"x"}`))
	assert.NoError(t, err, "version 2 is read for every kind, though only a lease is written at it")
	_, err = DecodeRecord([]byte(`{"v":5,"kind":"lease"}`))
	var uv *UnknownVersionError
	assert.ErrorAs(t, err, &uv)
}

// TestCheckWriteValue: a value with a control character is refused when
// written, with the character and its offset named; printable values,
// spaces and non-ASCII letters pass.
func TestCheckWriteValue(t *testing.T) {
	for _, ok := range []string{"", "10.0.0.7:8080", "a b", "zürich-1", "日本"} {
		assert.NoError(t, CheckWriteValue(ok), ok)
	}
	for _, bad := range []string{"evil\x1b[2J", "bell\a", "a\r\nb", "tab\t", "del\x7f", "c1\u0085", "nul\x00"} {
		err := CheckWriteValue(bad)
		require.ErrorIs(t, err, ErrInvalid, "%q", bad)
		assert.Contains(t, err.Error(), "control character", "%q", bad)
		assert.NotContains(t, err.Error(), "\x1b")
	}
	assert.ErrorIs(t, CheckWriteValue("\xff"), ErrInvalid)
}

// TestCheckWriteValueRefusesFormatCharacters: a bidi override, an isolate,
// a zero-width character or a byte-order mark (category Cf) is refused
// with one line naming it and its byte offset, and the line carries the
// character only escaped.
func TestCheckWriteValueRefusesFormatCharacters(t *testing.T) {
	for _, c := range []struct{ v, rule string }{
		{"ab\u202ecd", "format character U+202E (RIGHT-TO-LEFT OVERRIDE) at byte 2;"},
		{"\u2066x\u2069", "format character U+2066 (LEFT-TO-RIGHT ISOLATE) at byte 0;"},
		{"a\u200bb", "format character U+200B (ZERO WIDTH SPACE) at byte 1;"},
		{"é\ufeff", "format character U+FEFF (ZERO WIDTH NO-BREAK SPACE) at byte 2;"},
		{"tag\U000E0041", "format character U+E0041 at byte 3;"},
	} {
		err := CheckWriteValue(c.v)
		require.ErrorIs(t, err, ErrInvalid, "%q", c.v)
		var ie *InvalidError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, "value", ie.What)
		assert.Contains(t, err.Error(), c.rule, "%q", c.v)
		assert.NotContains(t, err.Error(), "\n")
		for _, r := range err.Error() {
			assert.False(t, r >= 0x2000 && r <= 0x206f || r == 0xfeff || r >= 0xe0000, "%q: %U in the error", c.v, r)
		}
	}
	assert.NoError(t, CheckWriteValue("مرحبا-1"), "right-to-left letters are not format characters")
}

// TestPrintableValue: what a printer shows of a value read from the topic
// holds no control byte, and an escaped value is quoted.
func TestPrintableValue(t *testing.T) {
	assert.Equal(t, "10.0.0.7:8080", PrintableValue("10.0.0.7:8080"))
	assert.Equal(t, "zürich 1", PrintableValue("zürich 1"))
	assert.Equal(t, `"evil\x1b[2J\a\r\n"`, PrintableValue("evil\x1b[2J\a\r\n"))
	assert.Equal(t, `"\u202egnp.exe"`, PrintableValue("\u202egnp.exe"))
	assert.Equal(t, `"\xff"`, PrintableValue("\xff"))
	assert.Equal(t, `"\"quoted\""`, PrintableValue(`"quoted"`))
	for _, v := range []string{"\x1b", "\a", "\r", "\n", "\x7f", "\u0085", "\x00"} {
		for _, c := range []byte(PrintableValue("x" + v + "y")) {
			assert.False(t, c < 0x20 || c == 0x7f, "%q", v)
		}
	}
}
