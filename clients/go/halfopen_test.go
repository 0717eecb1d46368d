package hotkeyd

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// freezableProxy forwards TCP to a server until frozen; frozen, it keeps every
// connection open but forwards nothing (a half-open path: no FIN, no RST).
type freezableProxy struct {
	ln     net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *freezableProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezableProxy{ln: ln}
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go p.pipe(c, u)
			go p.pipe(u, c)
		}
	}()
	return p
}

func (p *freezableProxy) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !p.frozen.Load() { // frozen: swallowed, never forwarded
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *freezableProxy) Addr() string { return p.ln.Addr().String() }

func (p *freezableProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// A subscription whose path stops forwarding without closing is noticed by PING and
// replaced; the hot set is current again once the path heals.
func TestSubscriberNoticesHalfOpenConnection(t *testing.T) {
	srv := startRedis(t)
	direct := srv.Client(t)
	proxy := startProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	ns := Namespace{Prefix: "halfopen"}
	sub := NewSubscriber(SubscriberOptions{Client: client, Namespace: ns, HealthInterval: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	before := sub.Stats().Reconnects

	proxy.frozen.Store(true)
	frozenAt := time.Now()
	for sub.Stats().Reconnects == before {
		if time.Since(frozenAt) > 10*time.Second {
			t.Fatal("a subscription that stopped forwarding was not noticed within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("half-open connection noticed after %v", time.Since(frozenAt).Round(time.Millisecond))

	proxy.frozen.Store(false)
	connects := sub.Stats().Connects
	healedAt := time.Now()
	for sub.Stats().Connects == connects {
		if time.Since(healedAt) > 15*time.Second {
			t.Fatal("no fresh subscription after the path healed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	msg := `{"v":1,"instance":"d1","seq":1,"ts":` + nowTS() + `,"hot":[{"key":"k","rate":5,"rule":"r","ttl_ms":5000}]}`
	key := Key{Bytes: "k"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := direct.Publish(ctx, ns.EventsChannel(), msg).Err(); err != nil {
			t.Fatal(err)
		}
		if _, ok := sub.HotSet().Get(key); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new subscription does not receive messages")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func nowTS() string {
	return strconv.FormatFloat(float64(time.Now().UnixNano())/1e9, 'f', 3, 64)
}
