package gateway

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
)

// relayer moves tunnels' bytes. Between two sockets it splices them through
// a kernel pipe (splice(2): the bytes never enter this process), else it
// reads and writes them through a buffer. Either a pipe or a buffer is
// taken from a pool only while a chunk moves and given back before the
// relay waits for the next one, so an idle tunnel holds neither. Pipes are
// bounded (maxPipes); without a free one a chunk goes through a buffer.
type relayer struct {
	buffers *sync.Pool
	// pipes is nil where splice(2) is not available.
	pipes *pipePool
}

func newRelayer() *relayer {
	return &relayer{buffers: newBufferPool(), pipes: newPipePool(maxPipes)}
}

// maxPipes bounds the kernel pipes the relay holds at once (two
// descriptors and up to 256 KiB of pipe buffer each: 32 MiB in all, half of
// an unprivileged user's default fs.pipe-user-pages-soft): that many
// chunks move by splice at a time, the others through buffers.
const maxPipes = 128

// close closes the pipes kept for later chunks.
func (r *relayer) close() {
	if r.pipes != nil {
		r.pipes.close()
	}
}

// copy copies src to dst until src ends, then closes dst's write side so
// the other direction can finish, and returns the bytes copied.
func (r *relayer) copy(dst, src net.Conn) int64 {
	var n int64
	srcRaw, _ := rawConn(src)
	dstRaw, _ := rawConn(dst)
	for {
		var m int64
		var err error
		spliced := false
		if srcRaw != nil && dstRaw != nil && r.pipes != nil {
			m, spliced, err = r.pipes.splice(dstRaw, srcRaw)
		}
		if !spliced {
			m, err = r.copyChunk(dst, src, srcRaw)
		}
		n += m
		if err != nil {
			break
		}
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
	return n
}

// copyChunk moves what src holds (waiting for it) to dst through a pooled
// buffer: one read and one write. It returns io.EOF at src's end.
func (r *relayer) copyChunk(dst, src net.Conn, srcRaw syscall.RawConn) (int64, error) {
	var buf *[]byte
	var n int
	var rerr error
	if srcRaw != nil {
		buf, n, rerr = readPooled(srcRaw, r.buffers)
	} else {
		buf = r.buffers.Get().(*[]byte)
		n, rerr = src.Read(*buf)
	}
	if buf != nil {
		defer r.buffers.Put(buf)
	}
	if n > 0 {
		w, werr := dst.Write((*buf)[:n])
		if werr != nil {
			return int64(w), werr
		}
	}
	return int64(n), rerr
}

// readPooled reads what c holds into a buffer from pool, waiting for c to be
// readable if it holds nothing yet — without a buffer: the buffer goes back
// to the pool before each wait. It returns the buffer (nil on an error
// before any read), the bytes read and io.EOF at the end.
func readPooled(c syscall.RawConn, pool *sync.Pool) (*[]byte, int, error) {
	var buf *[]byte
	var n int
	var err error
	if cerr := c.Read(func(fd uintptr) bool {
		if buf == nil {
			buf = pool.Get().(*[]byte)
		}
		for {
			n, err = syscall.Read(int(fd), *buf)
			if err != syscall.EINTR {
				break
			}
		}
		if err == syscall.EAGAIN {
			pool.Put(buf)
			buf = nil
			return false // wait for readable, holding nothing
		}
		return true
	}); cerr != nil {
		return buf, 0, cerr
	}
	switch {
	case err != nil:
		return buf, 0, err
	case n == 0:
		return buf, 0, io.EOF
	}
	return buf, n, nil
}

// copyBufferSize is a pooled relay buffer's size.
const copyBufferSize = 128 << 10

func newBufferPool() *sync.Pool {
	return &sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}
}

// rawConn is c's descriptor, for a socket (or a wrapper of one that
// exposes it).
func rawConn(c net.Conn) (syscall.RawConn, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a syscall.Conn")
	}
	return sc.SyscallConn()
}
