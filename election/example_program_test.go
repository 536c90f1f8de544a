package election_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/krabka/krole/election"
)

// A whole program, in the shape of etcd's concurrency.Election, that
// imports this package alone: it campaigns for the role "db" with its
// address as the value, names the leader, resigns, and leaves. Nothing
// else needs starting: the first Campaign starts the session, and Close
// (deferred, as etcd's Session.Close) resigns what is held and stops it.
// KROLE_BROKERS (default 127.0.0.1:9092), KROLE_TOPIC and
// KROLE_TXN_PREFIX name the cluster, as for the krole command; `krole
// dev` starts one. Run it twice with different member ids to see the
// second wait in Campaign until the first resigns.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	sess, err := election.New(election.Config{
		Cluster: election.Cluster{
			Brokers:   strings.Split(cmp.Or(os.Getenv("KROLE_BROKERS"), "127.0.0.1:9092"), ","),
			Topic:     os.Getenv("KROLE_TOPIC"),      // "" is krole.roles
			TxnPrefix: os.Getenv("KROLE_TXN_PREFIX"), // "" is krole.
		},
		Member:   "node-1", // one process per member id
		Roles:    []election.Role{"db"},
		Settings: election.Settings{LeaseDuration: 2 * time.Second},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()
	e, err := sess.Election("db")
	if err != nil {
		log.Fatal(err)
	}

	// Blocks until this member holds the role.
	h, err := e.Campaign(ctx, "10.0.0.1:5432")
	if err != nil {
		log.Fatal(err) // errors.Is(err, election.ErrMemberInUse): node-1 runs elsewhere
	}
	fmt.Println("elected:", h.Member, "under token", h.Token.Epoch >= 0)

	// The holder as this session sees it: this member, from the moment
	// Campaign returned.
	l, err := e.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", l.Member, "at", l.Value)

	// Hands the role over and leaves the queue until the next Campaign.
	if err := e.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := e.Leader(ctx); errors.Is(err, election.ErrNoLeader) {
		fmt.Println("resigned: no leader")
	}
}
