package hotkeyd

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// The durable backstop: final results in a SQL table with a unique key. Redis replicates
// asynchronously, so a failover or a restart can lose a fresh record; with a store
//
//   - Begin that finds nothing in Redis looks in the store, so a result Redis forgot is
//     still replayed (and written back to Redis);
//   - Complete whose record Redis lost writes the result to the store anyway: the store's
//     unique key is then the fence, and a true double completion (the operation ran twice
//     after Redis forgot) returns a *DuplicateCompletionError instead of replacing the
//     first result.
//
// The table is the Python DurableStore's (same columns, same digests), so one table
// serves every language.

// ErrDuplicateCompletion: the durable store already holds another completion of the key
// (the operation ran twice after Redis lost its record); the first result is kept. The
// error is a *DuplicateCompletionError.
var ErrDuplicateCompletion = errors.New("hotkeyd: idempotency key completed twice")

// DuplicateCompletionError carries the result the store kept.
type DuplicateCompletionError struct {
	Key    string
	Stored []byte // the first completion's result (what retries replay)
	Failed bool
}

func (e *DuplicateCompletionError) Error() string {
	return fmt.Sprintf("hotkeyd: idempotency key %q was completed twice (Redis lost its record); the first result is kept", e.Key)
}

func (e *DuplicateCompletionError) Unwrap() error { return ErrDuplicateCompletion }

// StoredFinal is one final result as a durable store keeps it.
type StoredFinal struct {
	Digest      string // RecordDigest(scope, key): the unique key
	Key         string
	Fingerprint string
	Failed      bool
	Token       int64 // the fencing token of the lease that completed it
	Result      []byte
}

// IdempotencyStore keeps final results durably (IdempotencyOptions.Store).
type IdempotencyStore interface {
	// Get returns the final result stored for digest, or nil.
	Get(ctx context.Context, digest string) (*StoredFinal, error)
	// Put inserts f unless the digest is there already, and returns what the store holds
	// afterwards: f, or the earlier completion.
	Put(ctx context.Context, f StoredFinal) (StoredFinal, error)
}

// SQLIdempotencyStore is an IdempotencyStore over database/sql (tested with PostgreSQL;
// any database with INSERT ... ON CONFLICT DO NOTHING, such as sqlite, works).
type SQLIdempotencyStore struct {
	db     *sql.DB
	table  string
	dollar bool // $1 placeholders (PostgreSQL) instead of ?
}

// NewSQLIdempotencyStore returns a store in table (default "hotkeyd_idempotency").
// postgres selects $n placeholders and BYTEA.
func NewSQLIdempotencyStore(db *sql.DB, table string, postgres bool) (*SQLIdempotencyStore, error) {
	if table == "" {
		table = "hotkeyd_idempotency"
	}
	for i, c := range table {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return nil, fmt.Errorf("hotkeyd: table must be letters, digits and '_', got %q", table)
		}
	}
	return &SQLIdempotencyStore{db: db, table: table, dollar: postgres}, nil
}

func (s *SQLIdempotencyStore) q(text string) string {
	if !s.dollar {
		return text
	}
	var b strings.Builder
	n := 0
	for _, c := range text {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
		} else {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// CreateTable creates the table if it does not exist.
func (s *SQLIdempotencyStore) CreateTable(ctx context.Context) error {
	blob := "BLOB"
	if s.dollar {
		blob = "BYTEA"
	}
	_, err := s.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+s.table+" ("+
		"digest VARCHAR(64) PRIMARY KEY, idem_key VARCHAR(1024) NOT NULL, fingerprint VARCHAR(64) NOT NULL,"+
		" failed SMALLINT NOT NULL, token BIGINT NOT NULL, result "+blob+" NOT NULL)")
	return err
}

// Get implements IdempotencyStore.
func (s *SQLIdempotencyStore) Get(ctx context.Context, digest string) (*StoredFinal, error) {
	f := StoredFinal{Digest: digest}
	var failed int
	err := s.db.QueryRowContext(ctx, s.q("SELECT idem_key, fingerprint, failed, token, result FROM "+s.table+" WHERE digest = ?"), digest).
		Scan(&f.Key, &f.Fingerprint, &failed, &f.Token, &f.Result)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f.Failed = failed != 0
	return &f, nil
}

// Put implements IdempotencyStore.
func (s *SQLIdempotencyStore) Put(ctx context.Context, f StoredFinal) (StoredFinal, error) {
	failed := 0
	if f.Failed {
		failed = 1
	}
	res := f.Result
	if res == nil {
		res = []byte{}
	}
	r, err := s.db.ExecContext(ctx, s.q("INSERT INTO "+s.table+" (digest, idem_key, fingerprint, failed, token, result)"+
		" VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING"), f.Digest, f.Key, f.Fingerprint, failed, f.Token, res)
	if err != nil {
		return StoredFinal{}, err
	}
	if n, err := r.RowsAffected(); err != nil || n == 1 {
		return f, err
	}
	had, err := s.Get(ctx, f.Digest)
	if err != nil || had == nil {
		return f, err
	}
	return *had, nil
}
