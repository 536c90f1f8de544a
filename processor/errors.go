package processor

import "errors"

var (
	// ErrInvalidSettings matches every [*SettingsError]: a setting or a
	// combination of settings that cannot work.
	ErrInvalidSettings = errors.New("invalid settings")

	// ErrNotHolder is returned by [Member.Resign] when this member does
	// not hold the role at the time the resignation is handled.
	ErrNotHolder = errors.New("this member does not hold the role")

	// ErrUnknownRole is returned for a role the Member was not created
	// for.
	ErrUnknownRole = errors.New("the member does not run this role")

	// ErrNotRunning is returned by [Member.Resign] when [Member.Run] is not
	// running.
	ErrNotRunning = errors.New("the member is not running")

	// ErrMemberInUse matches the [*MemberInUseError] that [Member.Run]
	// returns when another live process runs under the member's id.
	ErrMemberInUse = errors.New("the member id is in use by another live process")

	// ErrAlreadyRun is returned by a second call of [Member.Run]: a Member
	// runs once.
	ErrAlreadyRun = errors.New("the member has already been run")

	// ErrOverloaded is the cause of a call the Member gave up on before it
	// began, after waiting too long for a call slot (Settings.MaxInFlight);
	// logged, and a failure of the call (the role backs off).
	ErrOverloaded = errors.New("the member's calls are all in flight")
)
