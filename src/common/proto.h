/*
 * proto: the framed, versioned, binary-safe protocol between the host and
 * cpuos-agent over one virtio-serial port (see docs/agent-protocol.md).
 * Pure codec, no I/O: shared by the static guest agent and the host runner,
 * and the first line of defence against hostile bytes, so every length and
 * count is checked here before anyone looks at a value.
 */
#ifndef CPUOS_PROTO_H
#define CPUOS_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PROTO_VERSION 2
#define PROTO_HDR_SIZE 12
#define PROTO_MAX_PAYLOAD (256u * 1024) /* larger frames are a protocol error */
#define PROTO_MAX_ATTRS 4096            /* per frame */
#define PROTO_MAX_STR 4096              /* paths, args, env entries, messages */
#define PROTO_DATA_CHUNK (64u * 1024)   /* what writers put in one DATA frame */
/* Credit windows (docs/agent-protocol.md): per operation and direction. */
#define PROTO_DEFAULT_WINDOW (1u << 20) /* agent -> host, when A_WINDOW is absent */
#define PROTO_MIN_WINDOW (64u * 1024)
#define PROTO_MAX_WINDOW (64u << 20)
#define PROTO_INPUT_WINDOW (512u * 1024) /* host -> agent P_DATA, per operation */
#define PROTO_FRAME_COST 64u            /* the least a frame costs against a window */
#define PROTO_MAX_LIST 100000u          /* P_LIST entries before E2BIG */

/* Frame types. Requests open operation `id` (host-chosen, non-zero, unique
 * among the host's live operations); everything else belongs to one. */
enum proto_type {
	/* host -> agent: requests */
	P_HELLO = 1,
	P_PING = 2,
	P_EXEC = 3,
	P_ATTACH = 4,
	P_WAIT = 5,
	P_SIGNAL = 6,
	P_PS = 7,
	P_FWRITE = 8,
	P_FREAD = 9,
	P_STAT = 10,
	P_LIST = 11,
	P_MKDIR = 12,
	P_REMOVE = 13,
	P_RENAME = 14,
	P_SETTIME = 15,
	P_ENTROPY = 16,
	P_POWEROFF = 17,
	P_CANCEL = 18,
	P_RESTORED = 19, /* the VM was restored or forked: fix the guest up */
	/* code contexts: long-lived interpreters (docs/agent-protocol.md, "Code") */
	P_CODE = 20,        /* run code in a context, starting its kernel if need be */
	P_CTX_CREATE = 21,  /* a new context, its kernel started now */
	P_CTX_LIST = 22,    /* one P_ENTRY per context */
	P_CTX_RESTART = 23, /* a new kernel for a context, its state gone */
	P_CTX_DELETE = 24,  /* the context and its kernel gone */
	P_RESIZE = 25,      /* a terminal's size: A_PROC, A_ROWS, A_COLS */
	P_WATCH = 26,       /* file system events under A_PATH: P_FSEVENT frames */
	P_STATS = 27,       /* the guest's memory, disk and network use */
	P_TRUST = 28,       /* A_BYTES, a PEM certificate: into the system's CA bundles */
	/* both ways, inside an operation: raw bytes (stdin, file content) */
	P_DATA = 32,
	/* both ways, inside an operation: A_CREDIT more bytes may be sent */
	P_CREDIT = 33,
	/* agent -> host */
	P_OK = 64,      /* ends an operation successfully; attributes per request */
	P_ERROR = 65,   /* ends an operation: A_ERRNO, A_MESSAGE */
	P_STARTED = 66, /* exec/attach: A_PROC, A_PID */
	P_STDOUT = 67,  /* raw output bytes */
	P_STDERR = 68,
	P_EXIT = 69,    /* ends exec/attach/wait: A_EXIT_CODE or A_SIGNAL, A_TIMED_OUT */
	P_ENTRY = 70,   /* one item of a listing (file or process) */
	P_NOTICE = 71,  /* id 0, unsolicited: A_NOTICE */
	P_EVENT = 72,   /* code: raw bytes of the kernel's JSON lines (results, error) */
	P_FSEVENT = 73, /* watch: one event, A_FSOP, A_PATH, A_ISDIR */
};

/* Frame flags. */
#define PF_EOF 0x0001 /* P_DATA: last frame of this stream (payload may be empty) */
#define PF_MASK 0x0001

/* Attribute tags. Integers are little-endian u32 or u64 as listed. */
enum proto_tag {
	A_VERSION = 1,     /* u32 */
	A_AGENT = 2,       /* str: agent version string */
	A_ARG = 3,         /* str, repeated: argv */
	A_SHELL = 4,       /* str: run with /bin/sh -c */
	A_ENV = 5,         /* str, repeated: NAME=value */
	A_CWD = 6,         /* str */
	A_USER = 7,        /* str: user name (default root) */
	A_TIMEOUT_MS = 8,  /* u64: 0 = none */
	A_STDIN = 9,       /* u32 bool: keep stdin open for P_DATA */
	A_BACKGROUND = 10, /* u32 bool: exec returns after P_STARTED */
	A_PROC = 11,       /* u32: agent process id */
	A_PID = 12,        /* u32: guest pid */
	A_SIGNO = 13,      /* u32 */
	A_PATH = 14,       /* str: absolute */
	A_PATH2 = 15,      /* str: rename target */
	A_MODE = 16,       /* u32: permission bits (and type in P_ENTRY) */
	A_DEPTH = 17,      /* u32: listing depth, 1 = the directory itself */
	A_RECURSIVE = 18,  /* u32 bool */
	A_TIME_NS = 19,    /* u64: CLOCK_REALTIME in ns */
	A_BYTES = 20,      /* raw */
	A_ERRNO = 21,      /* u32: Linux errno */
	A_MESSAGE = 22,    /* str */
	A_EXIT_CODE = 23,  /* u32 */
	A_SIGNAL = 24,     /* u32: terminating signal */
	A_TIMED_OUT = 25,  /* u32 bool */
	A_SIZE = 26,       /* u64 */
	A_MTIME_NS = 27,   /* u64 */
	A_UID = 28,        /* u32 */
	A_GID = 29,        /* u32 */
	A_LINK = 30,       /* str: symlink target */
	A_STATE = 31,      /* u32: enum proto_proc_state */
	A_CMD = 32,        /* str: process command line, for listings */
	A_NOTICE = 33,     /* u32: enum proto_notice */
	/* 34 was an output offset for attach replay; unused, left free */
	A_TARGET = 35,     /* u32: operation id, for P_CANCEL */
	A_PARENTS = 36,    /* u32 bool: mkdir -p */
	A_BOOT_NS = 37,    /* u64: guest CLOCK_BOOTTIME when the agent started */
	A_READY_NS = 38,   /* u64: guest CLOCK_BOOTTIME when it began serving */
	A_WINDOW = 39,     /* u32: output credit an operation starts with */
	A_CREDIT = 40,     /* u32: credit returned by P_CREDIT */
	A_HOSTNAME = 41,   /* str: P_RESTORED: a new hostname (a new sandbox) */
	A_MACHINE_ID = 42, /* str: P_RESTORED: 32 hex digits for /etc/machine-id */
	A_GENERATION = 43, /* u32: P_RESTORED: how many restores this sandbox had */
	A_CONTEXT = 44,    /* str: a code context's id */
	A_LANGUAGE = 45,   /* str: a code context's language ("python", "bash") */
	A_CODE = 46,       /* raw: the code of P_CODE, UTF-8 without NUL */
	A_FORMATS = 47,    /* str: figure formats, "png" or "png,svg" */
	A_RESTARTED = 48,  /* u32 bool: P_STARTED of P_CODE: the kernel had died, this is a new one */
	A_DIED = 49,       /* u32 bool: P_OK of P_CODE: the kernel died during the call */
	A_UNCOUNTED = 50,  /* u32 bool: P_CODE: a call that is not one of the context's cells
			    * (no execution count, no `_`): the host warming a kernel */
	A_ROWS = 51,       /* u32: a terminal's rows (P_EXEC starts the process on a
			    * pseudo-terminal of that size; P_RESIZE) */
	A_COLS = 52,       /* u32: a terminal's columns, given with A_ROWS */
	A_PTY = 53,        /* u32 bool: P_STARTED, P_OK of a background exec, P_ENTRY
			    * of P_PS: the process runs on a pseudo-terminal */
	A_FSOP = 54,       /* u32: enum proto_fs_op, what a P_FSEVENT tells */
	A_ISDIR = 55,      /* u32 bool: P_FSEVENT: the path is a directory */
	A_MEM_TOTAL = 56,  /* u64 bytes: P_STATS: MemTotal */
	A_MEM_AVAIL = 57,  /* u64 bytes: MemAvailable */
	A_DISK_TOTAL = 58, /* u64 bytes: the root file system's size */
	A_DISK_USED = 59,  /* u64 bytes: and what of it is used */
	A_NET_RX = 60,     /* u64 bytes: received on every interface but lo */
	A_NET_TX = 61,     /* u64 bytes: sent */
	A_CPU_NS = 62,     /* u64: CPU time the guest's CPUs spent busy, in ns */
	A_NCPU = 63,       /* u32: CPUs online */
};

enum proto_proc_state { PS_RUNNING = 1, PS_EXITED = 2 };
/* A_STATE of a code context in P_CTX_LIST. */
enum proto_ctx_state { CS_IDLE = 1, CS_BUSY = 2, CS_EXITED = 3 };
enum proto_notice { PN_POWEROFF = 1, PN_REBOOT = 2 };
/* A_FSOP of a P_FSEVENT. FS_OVERFLOW: events were lost (a queue was full,
 * or a recursive watch reached its directory cap), A_PATH is where. */
enum proto_fs_op {
	FS_CREATE = 1,
	FS_WRITE = 2,
	FS_REMOVE = 3,
	FS_RENAME = 4,
	FS_CHMOD = 5,
	FS_OVERFLOW = 6,
};

/* A growable byte buffer, used for frames being built and bytes being read. */
struct pbuf {
	uint8_t *data;
	size_t len, cap;
	size_t mark; /* start of the frame being built */
};

void pbuf_release(struct pbuf *b);
/* Makes room for n more bytes: 0 or -ENOMEM. */
int pbuf_reserve(struct pbuf *b, size_t n);
int pbuf_append(struct pbuf *b, const void *p, size_t n);
/* Drops the first n bytes. */
void pbuf_consume(struct pbuf *b, size_t n);

/* Building a frame: begin, put attributes, end. end patches the length and
 * fails with -EMSGSIZE (frame removed) past PROTO_MAX_PAYLOAD. All return 0 or
 * -errno; after an error the caller drops the frame with proto_abort. */
int proto_begin(struct pbuf *b, uint16_t type, uint16_t flags, uint32_t id);
int proto_put(struct pbuf *b, uint16_t tag, const void *v, size_t n);
int proto_put_u32(struct pbuf *b, uint16_t tag, uint32_t v);
int proto_put_u64(struct pbuf *b, uint16_t tag, uint64_t v);
int proto_put_str(struct pbuf *b, uint16_t tag, const char *s);
int proto_end(struct pbuf *b);
void proto_abort(struct pbuf *b);
/* A whole frame whose payload is raw bytes (P_DATA, P_STDOUT, P_STDERR). */
int proto_raw(struct pbuf *b, uint16_t type, uint16_t flags, uint32_t id,
	      const void *p, size_t n);

/* A parsed frame; payload points into the caller's buffer. */
struct proto_frame {
	uint16_t type, flags;
	uint32_t id;
	uint32_t len;
	const uint8_t *payload;
};

/* Parses one frame from buf[0..n). Returns the bytes it spans (> 0), 0 when
 * more bytes are needed, -EMSGSIZE for a length over the cap, -EPROTO for
 * reserved flag bits. Does not look inside the payload. */
ssize_t proto_parse(const uint8_t *buf, size_t n, struct proto_frame *f);

/* Checks that the payload is a well-formed attribute list of at most
 * PROTO_MAX_ATTRS entries: 0 or -EPROTO. Call before the getters below. */
int proto_check_attrs(const struct proto_frame *f);

struct proto_attr {
	uint16_t tag;
	uint32_t len;
	const uint8_t *val;
};

/* Iterates attributes: *off starts at 0. Returns 1 with *a filled, 0 at the
 * end, -EPROTO on a malformed list. */
int proto_next(const struct proto_frame *f, size_t *off, struct proto_attr *a);
/* First attribute with this tag, or NULL. */
const uint8_t *proto_get(const struct proto_frame *f, uint16_t tag, uint32_t *len);
/* Typed getters: 0, -ENOENT when absent, -EPROTO when the size is wrong. */
int proto_get_u32(const struct proto_frame *f, uint16_t tag, uint32_t *v);
int proto_get_u64(const struct proto_frame *f, uint16_t tag, uint64_t *v);
/* Copies a string attribute NUL-terminated into dst[cap]: 0, -ENOENT,
 * -ENAMETOOLONG when it does not fit, -EINVAL when it holds a NUL byte. */
int proto_get_str(const struct proto_frame *f, uint16_t tag, char *dst, size_t cap);
/* Validates a string attribute value in place (no NUL, at most
 * PROTO_MAX_STR): 0 or -errno as proto_get_str. */
int proto_check_str(const struct proto_attr *a);

/* What a P_STDOUT, P_STDERR or P_DATA frame of n payload bytes costs
 * against a credit window. */
static inline uint32_t proto_cost(size_t n)
{
	return n < PROTO_FRAME_COST ? PROTO_FRAME_COST : (uint32_t)n;
}

/* Name of a frame type for logs ("exec", "data", ...), "?" if unknown. */
const char *proto_type_name(uint16_t type);

#endif
