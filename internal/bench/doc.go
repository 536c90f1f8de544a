// Package bench holds the measurements behind `krole bench`: on one role,
// failover and handover ([Succession]), acquire ([Acquire]) and steady
// ([Steady]); on many, renew ([Renew]) and failover-many
// ([FailoverMany]). Each takes its options and a [Cluster] (where its
// members connect, the bench's own view, the status line) and returns the
// result the command prints. [StartEnv] starts the cluster a bench runs
// on and the bench's view of it. internal/cli has the commands: their
// flags and usage errors, the printing, and the hidden `krole bench
// member`, the member process of the many-roles benches ([RunMember]).
//
// # One role
//
// failover, handover and steady run `krole run` processes of the krole
// binary as members, as a deployment does, and time what the bench's own
// view shows; acquire runs a processor.Member in the bench process, on
// that view and one transport of its own ([Cluster.Connect]).
//
// # Member processes
//
// Each member of renew and failover-many is a process of its own (`krole
// bench member`), with its own view and transport, as a deployed member
// is, rather than several members in one process: on two cores the cost is about the same (each
// member needs its view, its client and its goroutines either way, and a
// Go runtime idles cheaply), and processes give what one process cannot:
// each member's CPU (getrusage) and live heap apart, and a real crash
// (SIGKILL closes its connections mid-request) for failover-many. A
// member campaigns for its roles and prints JSON lines ([Line]) on
// stdout: "steady" once it holds its own roles (or the count it holds has
// not grown for [Plateau]: a member whose campaigns are paused, after a
// challenge timed out, keeps the rest queued; or after a bound),
// "elected" and "revoked" per event
// when asked, and "report" after each window. The bench drives it with
// lines on its stdin: "window D" measures one window of D and reports;
// the end of stdin makes it leave (it releases what it holds). The
// window starts in every member at once, after all are steady.
//
// # What a report counts
//
//   - transactions: EndTxn requests its transport sent in the window
//     (fencing.BrokerTransport.EndTxnsSent), commits and aborts: every
//     transaction the member ended, whatever it carried: its member
//     session's heartbeats (one per heartbeat interval for all the roles it
//     holds), the leases written at election, on RewriteLease and hourly
//     (processor.LeaseRewriteInterval), releases and session ends.
//     Counted in the member's transport, so
//     the same figure comes from the embedded cluster and from one named
//     by --brokers.
//   - renewals: the member session's heartbeat rounds, one per renew
//     interval for every role the member holds (see [RenewalSampler]);
//     lease writes are not renewals.
//   - CPU: the member process's user+system time over the window; the
//     bench process's over the same window is the embedded cluster's
//     (with the bench's view and its reading of the members' lines).
//   - memory: live heap (runtime.MemStats.HeapAlloc after runtime.GC) at
//     the window's end minus the same before the campaign (the member's
//     view caught up, nothing registered yet), over the roles held: the
//     member's memory per held role, its view's growth included. A view's
//     own: a second view started in the first member's process after its
//     window, caught up, its live heap over the roles it knows (a view
//     holds every role of the topic, not only a member's).
//
// # failover-many
//
// Members start one after the other; member i campaigns for the roles of
// members 0..i-1 (which they hold, so it only queues as a candidate) and
// for its own share, which nobody holds, so it takes it. Member 0, which
// every other member is a candidate of, is SIGKILLed; the bench's own view
// says when each of its roles shows a survivor's lease, and the survivors'
// events (their own Elected and Revoked, after the kill, on this
// machine's clock) say how often each role was elected and whether a
// survivor lost a role it held at the kill. The candidates of a role rank
// by registration, so most of the dead member's roles go to the earliest
// survivor, as succession does.
package bench
