package health

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// ProbeError is a failed probe whose message is in this operator's words.
// The message goes into the Proxy's status and a Warning Event, which anyone
// who may read the Proxy sees, so it never carries what the remote end sent
// (Go's errors quote the first bytes of a reply that is not HTTP, and a
// proxy's CONNECT refusal text): a probe must not read out an internal
// service for whoever points a Proxy at it. Cause keeps the library's error
// for the operator's own logs.
type ProbeError struct {
	// Class is ErrTimeout or ErrTransport.
	Class error
	// Summary says what failed, in our words.
	Summary string
	// Cause is the transport's error, for logs only.
	Cause error
}

func (e *ProbeError) Error() string { return e.Class.Error() + ": " + e.Summary }

// Is makes errors.Is(err, e.Class) hold; the cause is not unwrapped, so
// that nothing reaches it through the error chain by accident.
func (e *ProbeError) Is(target error) bool { return target == e.Class }

// transportSummary names what failed in a request through the proxy, from
// the error's type and errno only.
func transportSummary(err error) string {
	where := "the request through the proxy"
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "proxyconnect" {
		where = "connecting to the proxy"
	}
	var (
		dnsErr      *net.DNSError
		recordErr   tls.RecordHeaderError
		alertErr    tls.AlertError
		verifyErr   *tls.CertificateVerificationError
		unknownAuth x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		invalidCert x509.CertificateInvalidError
	)
	var what string
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		what = "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		what = "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		what = "host unreachable"
	case errors.As(err, &dnsErr):
		what = "host name not resolved"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		what = "connection closed before an answer"
	case errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &invalidCert), errors.As(err, &verifyErr):
		what = "TLS certificate not accepted"
	case errors.As(err, &recordErr), errors.As(err, &alertErr):
		what = "TLS handshake failed"
	default:
		// Whatever else the transport says (a reply that is not HTTP, a
		// refused CONNECT) may quote the remote end.
		what = "no valid HTTP answer"
	}
	return fmt.Sprintf("%s: %s", where, what)
}
