package election_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/election"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// exampleCluster starts an embedded cluster with the role topic, as
// `krole dev` does, for the examples to run against; stop closes it.
func exampleCluster() (cfg fencing.Config, stop func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts, err := testcluster.CapFromEnv(devcluster.Options{Topic: fencing.DefaultTopic, Partitions: 1})
	if err != nil {
		panic(err)
	}
	c, err := devcluster.Start(ctx, opts)
	if err != nil {
		panic(err)
	}
	return fencing.Config{Brokers: c.ListenAddrs()}, c.Close
}

// exampleSession runs a session of member for the role "db", registered
// with value, until stop. It returns once the member is a candidate.
func exampleSession(cfg fencing.Config, member codec.MemberID, value string) (e *election.Election, stop func()) {
	sess, err := election.New(election.Config{
		Cluster: cfg, Member: member, Roles: []codec.Role{"db"}, Value: value,
		Settings: processor.Settings{LeaseDuration: 2 * time.Second},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sess.Run(ctx, nil) // the member campaigns from here on
	}()
	e, err = sess.Election("db")
	if err != nil {
		panic(err)
	}
	for { // until the member is a candidate: the examples need the queue in order
		st, err := sess.View().Role(ctx, "db")
		if err != nil {
			panic(err)
		}
		if st.Rank(member) >= 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return e, func() { cancel(); <-done }
}

// Campaign blocks until this member holds the role, like etcd's
// concurrency.Election.Campaign, and returns the holding with its token.
func ExampleElection_Campaign() {
	cfg, stopCluster := exampleCluster()
	defer stopCluster()
	e, stop := exampleSession(cfg, "node-1", "10.0.0.1:5432")
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := e.Campaign(ctx, "10.0.0.1:5432") // the value: this member's address
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Member, "holds", h.Role, "with value", h.Value, "under a token:", h.Token.Epoch >= 0)
	// Write fenced under the token with sess.Writer(h.Held()).
	// Output: node-1 holds db with value 10.0.0.1:5432 under a token: true
}

// Leader gives the live holder and its value, for clients to find it;
// ErrNoLeader when there is none.
func ExampleElection_Leader() {
	cfg, stopCluster := exampleCluster()
	defer stopCluster()
	e, stop := exampleSession(cfg, "node-1", "10.0.0.1:5432")
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.Campaign(ctx, "10.0.0.1:5432"); err != nil {
		panic(err)
	}
	h, err := e.Leader(ctx)
	for errors.Is(err, election.ErrNoLeader) { // the view has not read the lease yet
		time.Sleep(10 * time.Millisecond)
		h, err = e.Leader(ctx)
	}
	if err != nil {
		panic(err)
	}
	fmt.Println("leader:", h.Member, "at", h.Value)
	// Output: leader: node-1 at 10.0.0.1:5432
}

// Resign hands the role to the next candidate at once, whose Campaign
// returns; the member that resigned queues again at the back.
func ExampleElection_Resign() {
	cfg, stopCluster := exampleCluster()
	defer stopCluster()
	e1, stop1 := exampleSession(cfg, "node-1", "10.0.0.1:5432")
	defer stop1()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e1.Campaign(ctx, "10.0.0.1:5432"); err != nil {
		panic(err)
	}
	e2, stop2 := exampleSession(cfg, "node-2", "10.0.0.2:5432")
	defer stop2()
	won := make(chan election.Holding)
	go func() {
		h, err := e2.Campaign(ctx, "10.0.0.2:5432")
		if err != nil {
			panic(err)
		}
		won <- h
	}()

	if err := e1.Resign(ctx); err != nil {
		panic(err)
	}
	h := <-won
	fmt.Println(h.Member, "holds", h.Role, "now")
	// Output: node-2 holds db now
}

// Observe gives the current holder, then each change of holder (the zero
// Holder while there is none), never renewals: etcd's Observe, or
// `krole observe`.
func ExampleElection_Observe() {
	cfg, stopCluster := exampleCluster()
	defer stopCluster()
	e1, stop1 := exampleSession(cfg, "node-1", "10.0.0.1:5432")
	defer stop1()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e1.Campaign(ctx, "10.0.0.1:5432"); err != nil {
		panic(err)
	}
	e2, stop2 := exampleSession(cfg, "node-2", "10.0.0.2:5432")
	defer stop2()

	seen := 0
	for h := range e2.Observe(ctx) {
		if h.Member == "" {
			continue // no holder for a moment
		}
		fmt.Println("holder:", h.Member, "at", h.Value)
		if seen++; seen == 1 {
			if err := e1.Resign(ctx); err != nil { // the next holder is node-2
				panic(err)
			}
		} else {
			break
		}
	}
	// Output:
	// holder: node-1 at 10.0.0.1:5432
	// holder: node-2 at 10.0.0.2:5432
}

// A session without a member id or roles only reads: it names the holder
// and follows its changes, as etcd's Observe does, and never joins the
// role's queue; its Campaign is refused.
func ExampleNew_readOnly() {
	cfg, stopCluster := exampleCluster()
	defer stopCluster()
	e1, stop1 := exampleSession(cfg, "node-1", "10.0.0.1:5432")
	defer stop1()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e1.Campaign(ctx, "10.0.0.1:5432"); err != nil {
		panic(err)
	}

	sess, err := election.New(election.Config{Cluster: cfg}) // no Member, no Roles
	if err != nil {
		panic(err)
	}
	defer sess.Close()
	e, err := sess.Election("db")
	if err != nil {
		panic(err)
	}
	for h := range e.Observe(ctx) {
		if h.Member == "" {
			fmt.Println("no holder")
			break
		}
		fmt.Println("holder:", h.Member, "at", h.Value)
		if err := e1.Resign(ctx); err != nil { // node-1 leaves; nobody else campaigns
			panic(err)
		}
	}
	_, err = e.Campaign(ctx, "10.0.0.9:5432")
	fmt.Println("campaign:", errors.Is(err, election.ErrReadOnly))
	// Output:
	// holder: node-1 at 10.0.0.1:5432
	// no holder
	// campaign: true
}
