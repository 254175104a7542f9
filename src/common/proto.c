/*
 * proto: encoder and decoder for the host <-> agent frames. Header:
 * u32 payload length, u16 type, u16 flags, u32 operation id, little-endian.
 * Attribute payloads are a list of (u16 tag, u32 length, bytes).
 */
#include "proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = v & 0xff;
	p[1] = v >> 8;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (v >> (8 * i)) & 0xff;
}

static uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

void pbuf_release(struct pbuf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = b->mark = 0;
}

int pbuf_reserve(struct pbuf *b, size_t n)
{
	if (b->cap - b->len >= n)
		return 0;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap - b->len < n) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	uint8_t *p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int pbuf_append(struct pbuf *b, const void *p, size_t n)
{
	int r = pbuf_reserve(b, n);
	if (r < 0)
		return r;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

void pbuf_consume(struct pbuf *b, size_t n)
{
	if (n >= b->len) {
		b->len = 0;
		return;
	}
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
}

int proto_begin(struct pbuf *b, uint16_t type, uint16_t flags, uint32_t id)
{
	int r = pbuf_reserve(b, PROTO_HDR_SIZE);
	if (r < 0)
		return r;
	b->mark = b->len;
	uint8_t *h = b->data + b->len;
	put_le32(h, 0);
	put_le16(h + 4, type);
	put_le16(h + 6, flags);
	put_le32(h + 8, id);
	b->len += PROTO_HDR_SIZE;
	return 0;
}

int proto_put(struct pbuf *b, uint16_t tag, const void *v, size_t n)
{
	if (n > PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	int r = pbuf_reserve(b, 6 + n);
	if (r < 0)
		return r;
	put_le16(b->data + b->len, tag);
	put_le32(b->data + b->len + 2, (uint32_t)n);
	b->len += 6;
	return pbuf_append(b, v, n);
}

int proto_put_u32(struct pbuf *b, uint16_t tag, uint32_t v)
{
	uint8_t le[4];
	put_le32(le, v);
	return proto_put(b, tag, le, 4);
}

int proto_put_u64(struct pbuf *b, uint16_t tag, uint64_t v)
{
	uint8_t le[8];
	put_le32(le, (uint32_t)v);
	put_le32(le + 4, (uint32_t)(v >> 32));
	return proto_put(b, tag, le, 8);
}

int proto_put_str(struct pbuf *b, uint16_t tag, const char *s)
{
	size_t n = strlen(s);
	if (n > PROTO_MAX_STR)
		return -ENAMETOOLONG;
	return proto_put(b, tag, s, n);
}

int proto_end(struct pbuf *b)
{
	size_t n = b->len - b->mark - PROTO_HDR_SIZE;
	if (n > PROTO_MAX_PAYLOAD) {
		proto_abort(b);
		return -EMSGSIZE;
	}
	put_le32(b->data + b->mark, (uint32_t)n);
	b->mark = b->len;
	return 0;
}

void proto_abort(struct pbuf *b)
{
	b->len = b->mark;
}

int proto_raw(struct pbuf *b, uint16_t type, uint16_t flags, uint32_t id,
	      const void *p, size_t n)
{
	if (n > PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	int r = proto_begin(b, type, flags, id);
	if (r == 0)
		r = pbuf_append(b, p, n);
	if (r == 0)
		return proto_end(b);
	proto_abort(b);
	return r;
}

ssize_t proto_parse(const uint8_t *buf, size_t n, struct proto_frame *f)
{
	if (n < PROTO_HDR_SIZE)
		return 0;
	uint32_t len = get_le32(buf);
	if (len > PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	uint16_t flags = get_le16(buf + 6);
	if (flags & ~PF_MASK)
		return -EPROTO;
	if (n - PROTO_HDR_SIZE < len)
		return 0;
	f->len = len;
	f->type = get_le16(buf + 4);
	f->flags = flags;
	f->id = get_le32(buf + 8);
	f->payload = buf + PROTO_HDR_SIZE;
	return (ssize_t)(PROTO_HDR_SIZE + len);
}

int proto_next(const struct proto_frame *f, size_t *off, struct proto_attr *a)
{
	size_t o = *off;
	if (o == f->len)
		return 0;
	if (f->len - o < 6)
		return -EPROTO;
	uint32_t n = get_le32(f->payload + o + 2);
	if (f->len - o - 6 < n)
		return -EPROTO;
	a->tag = get_le16(f->payload + o);
	a->len = n;
	a->val = f->payload + o + 6;
	*off = o + 6 + n;
	return 1;
}

int proto_check_attrs(const struct proto_frame *f)
{
	size_t off = 0;
	struct proto_attr a;
	int r, count = 0;
	while ((r = proto_next(f, &off, &a)) == 1)
		if (++count > PROTO_MAX_ATTRS)
			return -EPROTO;
	return r;
}

const uint8_t *proto_get(const struct proto_frame *f, uint16_t tag, uint32_t *len)
{
	size_t off = 0;
	struct proto_attr a;
	while (proto_next(f, &off, &a) == 1) {
		if (a.tag == tag) {
			if (len)
				*len = a.len;
			return a.val;
		}
	}
	return NULL;
}

int proto_get_u32(const struct proto_frame *f, uint16_t tag, uint32_t *v)
{
	uint32_t n;
	const uint8_t *p = proto_get(f, tag, &n);
	if (!p)
		return -ENOENT;
	if (n != 4)
		return -EPROTO;
	*v = get_le32(p);
	return 0;
}

int proto_get_u64(const struct proto_frame *f, uint16_t tag, uint64_t *v)
{
	uint32_t n;
	const uint8_t *p = proto_get(f, tag, &n);
	if (!p)
		return -ENOENT;
	if (n != 8)
		return -EPROTO;
	*v = get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
	return 0;
}

int proto_check_str(const struct proto_attr *a)
{
	if (a->len > PROTO_MAX_STR)
		return -ENAMETOOLONG;
	if (memchr(a->val, 0, a->len))
		return -EINVAL;
	return 0;
}

int proto_get_str(const struct proto_frame *f, uint16_t tag, char *dst, size_t cap)
{
	struct proto_attr a = { .tag = tag };
	a.val = proto_get(f, tag, &a.len);
	if (!a.val)
		return -ENOENT;
	int r = proto_check_str(&a);
	if (r < 0)
		return r;
	if (a.len >= cap)
		return -ENAMETOOLONG;
	memcpy(dst, a.val, a.len);
	dst[a.len] = '\0';
	return 0;
}

const char *proto_type_name(uint16_t type)
{
	static const char *const names[] = {
		[P_HELLO] = "hello",     [P_PING] = "ping",
		[P_EXEC] = "exec",       [P_ATTACH] = "attach",
		[P_WAIT] = "wait",       [P_SIGNAL] = "signal",
		[P_PS] = "ps",           [P_FWRITE] = "fwrite",
		[P_FREAD] = "fread",     [P_STAT] = "stat",
		[P_LIST] = "list",       [P_MKDIR] = "mkdir",
		[P_REMOVE] = "remove",   [P_RENAME] = "rename",
		[P_SETTIME] = "settime", [P_ENTROPY] = "entropy",
		[P_POWEROFF] = "poweroff", [P_CANCEL] = "cancel",
		[P_RESTORED] = "restored", [P_CODE] = "code",
		[P_CTX_CREATE] = "ctx-create", [P_CTX_LIST] = "ctx-list",
		[P_CTX_RESTART] = "ctx-restart", [P_CTX_DELETE] = "ctx-delete",
		[P_RESIZE] = "resize",   [P_WATCH] = "watch",
		[P_STATS] = "stats",
		[P_DATA] = "data",       [P_OK] = "ok",
		[P_ERROR] = "error",     [P_STARTED] = "started",
		[P_STDOUT] = "stdout",   [P_STDERR] = "stderr",
		[P_EXIT] = "exit",       [P_ENTRY] = "entry",
		[P_NOTICE] = "notice",   [P_CREDIT] = "credit",
		[P_EVENT] = "event",     [P_FSEVENT] = "fsevent",
	};
	if (type < sizeof(names) / sizeof(names[0]) && names[type])
		return names[type];
	return "?";
}
