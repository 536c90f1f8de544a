package codec

import "fmt"

// KeyCodec is a goka codec for [Key]. goka passes keys as strings; this
// codec turns a [Key] or its string form into bytes and back.
type KeyCodec struct{}

// Encode accepts a Key or a string.
func (KeyCodec) Encode(v any) ([]byte, error) {
	switch k := v.(type) {
	case Key:
		if err := k.Validate(); err != nil {
			return nil, err
		}
		return k.Encode(), nil
	case string:
		if _, err := DecodeKey([]byte(k)); err != nil {
			return nil, err
		}
		return []byte(k), nil
	}
	return nil, fmt.Errorf("codec: KeyCodec cannot encode %T", v)
}

// Decode returns a Key.
func (KeyCodec) Decode(b []byte) (any, error) { return DecodeKey(b) }

// RecordCodec is a goka codec for [Record] values.
type RecordCodec struct{}

// Encode accepts a Record, *Record, Registration, *Registration, Lease or
// *Lease.
func (RecordCodec) Encode(v any) ([]byte, error) {
	switch r := v.(type) {
	case Record:
		return EncodeRecord(r)
	case *Record:
		return EncodeRecord(*r)
	case Registration:
		return EncodeRecord(Record{Registration: &r})
	case *Registration:
		return EncodeRecord(Record{Registration: r})
	case Lease:
		return EncodeRecord(Record{Lease: &r})
	case *Lease:
		return EncodeRecord(Record{Lease: r})
	}
	return nil, fmt.Errorf("codec: RecordCodec cannot encode %T", v)
}

// Decode returns a Record.
func (RecordCodec) Decode(b []byte) (any, error) { return DecodeRecord(b) }
