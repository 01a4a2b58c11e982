package proxyauth

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// maxLine bounds one line from Squid: a channel ID, a username and a
// password, URL-escaped.
const maxLine = 4096

// Serve answers Squid's basic-auth helper requests from in on out until in
// ends: "[channel] username password" (each URL-escaped) per line, answered
// "[channel] OK" or "[channel] ERR message=<why>". A channel ID is there when
// Squid runs the helper with concurrency; answers keep its order per line.
func Serve(in io.Reader, out io.Writer, v *Verifier) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 512), maxLine)
	w := bufio.NewWriter(out)
	for sc.Scan() {
		fmt.Fprintln(w, answer(sc.Text(), v))
		// Squid waits for each answer: flush now, not when the buffer fills.
		if err := w.Flush(); err != nil {
			return fmt.Errorf("writing to squid: %w", err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading from squid: %w", err)
	}
	return nil
}

// answer is the reply to one request line.
func answer(line string, v *Verifier) string {
	fields := strings.Fields(line)
	channel := ""
	if len(fields) == 3 {
		channel, fields = fields[0]+" ", fields[1:]
	}
	if len(fields) != 2 {
		return channel + "ERR message=" + url.PathEscape("want: [channel] username password")
	}
	user, err1 := url.PathUnescape(fields[0])
	pass, err2 := url.PathUnescape(fields[1])
	if err1 != nil || err2 != nil {
		return channel + "ERR message=" + url.PathEscape(ErrMalformed.Error())
	}
	if err := v.Check(user, pass); err != nil {
		return channel + "ERR message=" + url.PathEscape(err.Error())
	}
	return channel + "OK"
}

// Poller keeps a Verifier's live list fresh from the operator.
type Poller struct {
	cfg    HelperConfig
	v      *Verifier
	client *http.Client
	clock  clock.WithTicker
	// errs receives each failed poll (nil: dropped), for logs and tests.
	errs func(error)
}

// NewPoller returns the poller of c's live list into v; a nil clock is the
// real one. errs, if not nil, is told each failed poll.
func NewPoller(c HelperConfig, v *Verifier, clk clock.WithTicker, errs func(error)) (*Poller, error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(c.CAPEM)) {
			return nil, errors.New("proxy auth helper config: caPEM holds no usable certificate")
		}
		tlsConfig.RootCAs = pool
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: nil, MaxIdleConns: 1},
	}
	if errs == nil {
		errs = func(error) {}
	}
	return &Poller{cfg: c, v: v, client: client, clock: clk, errs: errs}, nil
}

// Run polls now and every PollInterval until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	t := p.clock.NewTicker(PollInterval)
	defer t.Stop()
	for {
		if err := p.Poll(ctx); err != nil {
			p.errs(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// maxListBytes bounds a live list's body: a proxy has few live leases.
const maxListBytes = 1 << 20

// Poll reads the live list once and gives it to the verifier.
func (p *Poller) Poll(ctx context.Context) error {
	u, err := url.Parse(strings.TrimSuffix(p.cfg.OperatorURL, "/") + LivePath)
	if err != nil {
		return fmt.Errorf("live list URL: %w", err)
	}
	u.RawQuery = url.Values{"namespace": {p.cfg.Namespace}, "name": {p.cfg.Name}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("live list request: %w", err)
	}
	req.Header.Set("Authorization", AuthScheme+" "+ListToken(p.cfg.Key, p.cfg.Proxy(), p.clock.Now()))
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("polling the live list: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListBytes))
	if err != nil {
		return fmt.Errorf("reading the live list: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("polling the live list: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var l LiveList
	if err := json.Unmarshal(body, &l); err != nil {
		return fmt.Errorf("decoding the live list: %w", err)
	}
	p.v.SetLive(l)
	return nil
}

// RunHelper is the helper program: it reads its configuration from
// configPath, polls the live list in the background when the configuration
// names the operator, and answers Squid on in and out until in ends. logf
// receives what a helper writes to Squid's cache.log.
func RunHelper(ctx context.Context, configPath string, in io.Reader, out io.Writer, logf func(string, ...any)) error {
	raw, err := os.ReadFile(configPath)
	if err != nil {
		return err
	}
	cfg, err := ParseHelperConfig(raw)
	if err != nil {
		return err
	}
	v := NewVerifier(cfg, nil)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	if cfg.OperatorURL != "" {
		p, err := NewPoller(cfg, v, nil, func(err error) { logf("proxy-auth-helper: %v", err) })
		if err != nil {
			return err
		}
		wg.Go(func() { p.Run(ctx) })
	} else {
		logf("proxy-auth-helper: no operator URL: a released lease's credentials work until they expire")
	}
	defer cancel()
	return Serve(in, out, v)
}
