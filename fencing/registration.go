package fencing

import (
	"context"
	"errors"
	"time"

	"github.com/krabka/krole/codec"
)

// AppendRegistration appends reg as the registration of reg.Member for
// role, as [BrokerTransport.RegisterValue] appends one, with every field
// reg sets: its value and its instance (see [codec.Registration]); a zero
// RegisteredAt is stamped with the local wall clock. It returns the
// registration's offset. An invalid reg returns an error matching
// [codec.ErrInvalid] before anything is sent.
func (t *BrokerTransport) AppendRegistration(ctx context.Context, role codec.Role, reg codec.Registration) (int64, error) {
	if reg.RegisteredAt == 0 {
		reg.RegisteredAt = time.Now().UnixMilli()
	}
	if err := errors.Join(role.Validate(), reg.Validate()); err != nil {
		return -1, &Error{Kind: ErrProducer, Role: role, Err: err}
	}
	val, err := codec.EncodeRecord(codec.Record{Registration: &reg})
	if err != nil {
		return -1, &Error{Kind: ErrProducer, Role: role, Err: err}
	}
	return t.appendPlain(ctx, role, codec.RegistrationKey(role, reg.Member).Encode(), val)
}

// RegisterInstance is [BrokerTransport.Register] with the registering
// process's instance in the registration (processor.InstanceRegisterer):
// the member writes it so that a second process under its member id
// can tell the registration is not its own.
func (t *BrokerTransport) RegisterInstance(ctx context.Context, role codec.Role, member codec.MemberID, instance string) (int64, error) {
	return t.AppendRegistration(ctx, role, codec.Registration{Member: member, Instance: instance})
}
