package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// runProbe fetches a URL and succeeds on a 2xx answer. Container
// healthchecks use it, since the final image has no curl or shell.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("probe", "URL", "Exit 0 when URL answers 2xx (the container healthcheck; the image has no curl).", false)
	timeout := c.fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := c.parse(args, stdout); err != nil {
		return err
	}
	fs := c.fs
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: probe takes one URL, e.g. seckill probe http://127.0.0.1:8081/readyz", errUsage)
	}
	status, err := getOK(ctx, fs.Arg(0), *timeout)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, status)
	return nil
}

// getOK fetches url within timeout and returns its status when it is 2xx;
// any other answer is an error quoting the start of its body.
func getOK(ctx context.Context, url string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", fmt.Errorf("%s answered %s: %s", url, resp.Status, body)
	}
	return resp.Status, nil
}
