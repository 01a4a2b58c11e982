package gateway

import (
	"io"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// pipePool holds the kernel pipes chunks are spliced through: at most max
// open at once, some kept free between chunks.
type pipePool struct {
	mu     sync.Mutex
	free   []kernelPipe
	open   int
	max    int
	closed bool
}

// kernelPipe is a pipe's read and write descriptors.
type kernelPipe struct{ r, w int }

// keptFreePipes are the free pipes kept for later chunks; more are closed.
const keptFreePipes = 32

// pipeSize is asked of each pipe (the default is 64 KiB): fewer, larger
// chunks. Where the kernel refuses it (an unprivileged user past
// fs.pipe-user-pages-soft) the pipe keeps its size.
const pipeSize = 256 << 10

// spliceChunk is the most one splice asks to move (more than a pipe holds).
const spliceChunk = 1 << 20

func newPipePool(max int) *pipePool { return &pipePool{max: max} }

// get is a free pipe, or a new one while fewer than max are open; ok is
// false when none can be had.
func (p *pipePool) get() (kernelPipe, bool) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		k := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return k, true
	}
	if p.closed || p.open >= p.max {
		p.mu.Unlock()
		return kernelPipe{}, false
	}
	p.open++
	p.mu.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		p.mu.Lock()
		p.open--
		p.mu.Unlock()
		return kernelPipe{}, false
	}
	_, _ = unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, pipeSize)
	return kernelPipe{r: fds[0], w: fds[1]}, true
}

// put gives back an empty pipe; a pipe that may still hold bytes is
// discarded (closed) instead.
func (p *pipePool) put(k kernelPipe, empty bool) {
	p.mu.Lock()
	if empty && !p.closed && len(p.free) < keptFreePipes {
		p.free = append(p.free, k)
		p.mu.Unlock()
		return
	}
	p.open--
	p.mu.Unlock()
	_ = unix.Close(k.r)
	_ = unix.Close(k.w)
}

// close closes the free pipes; pipes in use are closed as they come back.
func (p *pipePool) close() {
	p.mu.Lock()
	free := p.free
	p.free, p.closed = nil, true
	p.open -= len(free)
	p.mu.Unlock()
	for _, k := range free {
		_ = unix.Close(k.r)
		_ = unix.Close(k.w)
	}
}

// inUse is the pipes taken and not yet given back.
func (p *pipePool) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open - len(p.free)
}

// splice moves what src holds (waiting for it, holding no pipe) to dst
// through a pipe. spliced is false when no pipe was free and nothing moved:
// the caller copies that chunk instead. It returns io.EOF at src's end.
func (p *pipePool) splice(dst, src syscall.RawConn) (n int64, spliced bool, err error) {
	var k kernelPipe
	held, none := false, false
	var in int64
	var serr error
	if rerr := src.Read(func(fd uintptr) bool {
		if !held {
			if k, held = p.get(); !held {
				none = true
				return true
			}
		}
		for {
			in, serr = unix.Splice(int(fd), nil, k.w, nil, spliceChunk, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if serr != unix.EINTR {
				break
			}
		}
		if serr == unix.EAGAIN {
			p.put(k, true)
			held = false
			return false // wait for readable, holding no pipe
		}
		return true
	}); rerr != nil {
		serr = rerr
	}
	switch {
	case none:
		return 0, false, nil
	case serr != nil:
		if held {
			p.put(k, in <= 0)
		}
		return 0, true, serr
	case in == 0:
		p.put(k, true)
		return 0, true, io.EOF
	}
	left := in
	for left > 0 {
		var out int64
		var werr error
		if err := dst.Write(func(fd uintptr) bool {
			for {
				out, werr = unix.Splice(k.r, nil, int(fd), nil, int(left), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				if werr != unix.EINTR {
					break
				}
			}
			return werr != unix.EAGAIN // else wait for writable
		}); err != nil {
			werr = err
		}
		if out > 0 {
			left -= out
			n += out
		}
		if werr != nil {
			p.put(k, false)
			return n, true, werr
		}
	}
	p.put(k, true)
	return n, true, nil
}
