package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The raw-hot-row baseline sells a scratch product straight in MySQL and
// deletes it after. While it exists, the fleet's background jobs treat it
// as any product: the reconcile job loads its Redis copy and its buckets,
// a restock announcement gives it an epoch. Deleting its rows leaves those
// keys in Redis for good (no job visits a product the catalog no longer
// lists), so the lab removes them too, from every Redis named by
// --cpu-redis (the servers the instances use).

// productPatterns are the SCAN patterns of a product's keys: every key of
// the item's hash tag, {product:<id>}, and of its buckets',
// {product:<id>:b<n>}.
func productPatterns(id int64) []string {
	tag := "product:" + strconv.FormatInt(id, 10)
	return []string{"*{" + tag + "}*", "*{" + tag + ":*"}
}

// DropProductKeys deletes, on each Redis at addrs, the keys of product id
// and returns how many it deleted. It scans every server: on a Cluster
// each node holds its own slots' keys, and deletes them one by one, which
// a node accepts for the keys it holds.
func DropProductKeys(ctx context.Context, addrs []string, password string, id int64, timeout time.Duration) (int, error) {
	deleted := 0
	var errs []error
	for _, addr := range addrs {
		n, err := dropKeysOn(ctx, addr, password, productPatterns(id), timeout)
		deleted += n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		}
	}
	return deleted, errors.Join(errs...)
}

func dropKeysOn(ctx context.Context, addr, password string, patterns []string, timeout time.Duration) (int, error) {
	conn, err := dial(ctx, addr, timeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	do := func(args ...string) (any, error) {
		if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
			return nil, err
		}
		if _, err := conn.Write(Command(args...)); err != nil {
			return nil, err
		}
		return read(rd)
	}
	if password != "" {
		if _, err := do("AUTH", password); err != nil {
			return 0, fmt.Errorf("AUTH: %w", err)
		}
	}
	deleted := 0
	for _, pattern := range patterns {
		cursor := "0"
		for {
			r, err := do("SCAN", cursor, "MATCH", pattern, "COUNT", "1000")
			if err != nil {
				return deleted, fmt.Errorf("SCAN: %w", err)
			}
			page, ok := r.([]any)
			if !ok || len(page) != 2 {
				return deleted, fmt.Errorf("SCAN answered %v", r)
			}
			cursor, _ = page[0].(string)
			keys, _ := page[1].([]any)
			for _, k := range keys {
				key, _ := k.(string)
				n, err := do("DEL", key)
				if err != nil {
					return deleted, fmt.Errorf("DEL %s: %w", key, err)
				}
				if n, _ := n.(int64); n > 0 {
					deleted++
				}
			}
			if cursor == "0" || cursor == "" {
				break
			}
		}
	}
	return deleted, nil
}
