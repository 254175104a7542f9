/*
 * api_usage: metering. GET /v1/usage integrates the store's usage events
 * over a window and prices them; GET /metrics is the daemon's counters in
 * the Prometheus text format (0.0.4).
 */
#include "daemon/api/api.h"

#include "daemon/net/net.h"

#include "common/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_WINDOW_MS    (30LL * 86400 * 1000)
#define GIB_MONTH_S	     (30.0 * 86400) /* a month of storage: 30 days */
#define KEY_ID_SIZE	     sizeof(((struct store_key *)0)->id)
#define ACCOUNT_SIZE	     sizeof(((struct store_key *)0)->account)
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4"

/* ---- RFC 3339 ---- */

/* n decimal digits at *p into *out, advancing *p: 0, or -1. */
static int digits(const char **p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		char c = (*p)[i];
		if (c < '0' || c > '9')
			return -1;
		v = v * 10 + (c - '0');
	}
	*p += n;
	*out = v;
	return 0;
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar
 * (H. Hinnant's days_from_civil), so no time zone state is involved. */
static long long days_from_civil(int y, int m, int d)
{
	y -= m <= 2;
	long long era = (y >= 0 ? y : y - 399) / 400;
	long long yoe = y - era * 400;
	long long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m)
{
	static const int len[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	return m == 2 && leap ? 29 : len[m - 1];
}

/* "2026-11-29T09:41:58Z", "2026-11-29T09:41:58.250+01:00" and the like as
 * unix milliseconds (fractions past the millisecond are cut): 0, or -1 for
 * anything that is not such a time, or is before 1970. */
static int parse_rfc3339(const char *s, long long *out_ms)
{
	const char *p = s;
	int y, mo, d, h, mi, sec, ms = 0, oh = 0, om = 0, sign = 0;
	/* each test stops at the first byte that is off, NUL included, so
	 * nothing past the string is read */
	if (digits(&p, 4, &y) || *p++ != '-' || digits(&p, 2, &mo) || *p++ != '-' ||
	    digits(&p, 2, &d) || (*p != 'T' && *p != 't'))
		return -1;
	p++;
	if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &mi) || *p++ != ':' ||
	    digits(&p, 2, &sec))
		return -1;
	if (*p == '.') {
		int n = 0;
		for (p++; *p >= '0' && *p <= '9'; p++, n++)
			if (n < 3)
				ms = ms * 10 + (*p - '0');
		if (n == 0 || n > 9)
			return -1;
		for (; n < 3; n++)
			ms *= 10;
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-' || *p == ' ') {
		/* ' ': an unencoded '+' in a query string arrives as a space */
		sign = *p++ == '-' ? -1 : 1;
		if (digits(&p, 2, &oh) || *p++ != ':' || digits(&p, 2, &om) || oh > 23 || om > 59)
			return -1;
	} else {
		return -1;
	}
	/* sec 60: a leap second, counted as the next one */
	if (*p || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 ||
	    sec > 60)
		return -1;
	long long t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
	t -= sign * (oh * 3600 + om * 60);
	if (t < 0)
		return -1;
	*out_ms = t * 1000 + ms;
	return 0;
}

/* Unix milliseconds as RFC 3339, with ".mmm" only when there are some. */
static json_t *time_json(long long ms)
{
	char buf[CLOCK_RFC3339_LEN + 8];
	clock_rfc3339(ms / 1000, buf, CLOCK_RFC3339_LEN);
	size_t n = strlen(buf);
	if (ms % 1000 && n && buf[n - 1] == 'Z')
		snprintf(buf + n - 1, sizeof(buf) - (n - 1), ".%03lldZ", ms % 1000);
	return json_string(buf);
}

/* ---- GET /v1/usage ---- */

/* 1 if v is 1..size-1 printable ASCII bytes (spaces only with space set),
 * as the store takes key ids and accounts. */
static int ident_ok(const char *v, size_t size, int space)
{
	size_t n = strnlen(v, size);
	if (n == 0 || n >= size)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)v[i] < (space ? 0x20 : 0x21) || (unsigned char)v[i] > 0x7e)
			return 0;
	return 1;
}

/* Query parameter name as a time into *ms (untouched when absent): 0, or
 * -1 after answering 400. */
static int query_time(struct req *r, const char *name, long long *ms)
{
	int bad = 0;
	const char *v = req_query(r, name, &bad);
	if (!v)
		return 0;
	if (bad || parse_rfc3339(v, ms) < 0) {
		reply_error(r, 400, "bad_request",
			    "'%s' must be an RFC 3339 time like 2026-11-29T09:41:58Z", name);
		return -1;
	}
	return 0;
}

int api_usage(struct req *r)
{
	const struct api_ctx *a = r->api;
	long long now = (long long)(clock_realtime_ns() / 1000000);
	long long to = now, from = -1;
	if (query_time(r, "to", &to) < 0 || query_time(r, "from", &from) < 0)
		return 0;
	/* 30 days back from the window's end (so, by default, from now) */
	if (from < 0)
		from = to > DEFAULT_WINDOW_MS ? to - DEFAULT_WINDOW_MS : 0;
	if (from > to)
		return reply_error(r, 400, "bad_request", "'from' is after 'to'");

	int bad = 0;
	const char *key = req_query(r, "key", &bad);
	if (key && (bad || !ident_ok(key, KEY_ID_SIZE, 0)))
		return reply_error(r, 400, "bad_request", "'key' must be a key id (key_...)");
	const char *account = req_query(r, "account", &bad);
	if (account && (bad || !ident_ok(account, ACCOUNT_SIZE, 1)))
		return reply_error(r, 400, "bad_request", "'account' must be an account name");
	if (!r->admin) {
		/* a key sees its own account's usage, never another's */
		if (account && strcmp(account, r->account))
			return reply_error(r, 403, "forbidden",
					   "a key sees only its own account's usage");
		account = r->account;
	}

	struct store_usage u;
	int e = store_usage_query(a->store, account, key, from, to, now, &u);
	if (e < 0)
		return reply_error(r, 500, "internal", "cannot read usage: %s", strerror(-e));

	/* The reference size's price, scaled by the mean of the sandbox's
	 * vCPU and memory ratios to it: the sums already carry the sizes. */
	double run = 0;
	if (a->price_vcpus && a->price_memory_gib)
		run = a->price_usd_per_hour *
		      ((u.vcpu_s / a->price_vcpus + u.gib_s / a->price_memory_gib) / 2) / 3600;
	double storage = a->price_storage_usd_per_gib_month * u.paused_gib_s / GIB_MONTH_S;

	json_t *o = json_object();
	json_object_set_new(o, "account", account ? json_string(account) : json_null());
	json_object_set_new(o, "from", time_json(from));
	json_object_set_new(o, "to", time_json(to));
	json_object_set_new(o, "key", key ? json_string(key) : json_null());
	json_object_set_new(o, "sandboxes", json_integer(u.sandboxes));
	json_object_set_new(o, "running_seconds", json_real(u.running_s));
	json_object_set_new(o, "vcpu_seconds", json_real(u.vcpu_s));
	json_object_set_new(o, "gib_seconds", json_real(u.gib_s));
	json_object_set_new(o, "paused_gib_seconds", json_real(u.paused_gib_s));
	json_object_set_new(o, "cost_usd", json_real(run + storage));
	json_object_set_new(o, "price",
			    json_pack("{s:f,s:i,s:i,s:f}", "usd_per_hour", a->price_usd_per_hour,
				      "vcpus", (int)a->price_vcpus, "memory_gib",
				      (int)a->price_memory_gib, "storage_usd_per_gib_month",
				      a->price_storage_usd_per_gib_month));
	return reply_json(r, 200, o);
}

/* ---- GET /metrics ---- */

static void metric(FILE *f, const char *name, const char *type, const char *help,
		   unsigned long long v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

/* A summary without quantiles: _sum and _count. */
static void summary(FILE *f, const char *name, const char *help, double sum,
		    unsigned long long count)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s summary\n%s_sum %.3f\n%s_count %llu\n", name, help,
		name, name, sum, name, count);
}

/* The egress counters of each running sandbox the caller may see (its
 * account's; every one for the socket's admin): one nft run each. */
static void net_metrics(struct req *r, FILE *f)
{
	struct store_sbx *rows;
	size_t n;
	if (store_sbx_running(r->api->store, &rows, &n) < 0)
		return;
	struct net_counters *c = calloc(n ? n : 1, sizeof(*c));
	int *seen = calloc(n ? n : 1, sizeof(*seen));
	for (size_t i = 0; c && seen && i < n; i++)
		seen[i] = (r->admin || !strcmp(rows[i].account, r->account)) &&
			  sbx_net_counters(r->api->sbx, rows[i].id, &c[i]) == 0;
	fputs("# HELP cpuos_sandbox_egress_refused_packets Egress packets its policy refused.\n"
	      "# TYPE cpuos_sandbox_egress_refused_packets counter\n", f);
	for (size_t i = 0; c && seen && i < n; i++)
		if (seen[i])
			fprintf(f, "cpuos_sandbox_egress_refused_packets{sandbox=\"%s\"} %llu\n",
				rows[i].id, (unsigned long long)c[i].refused_packets);
	fputs("# HELP cpuos_sandbox_egress_flows Connections its policy let out.\n"
	      "# TYPE cpuos_sandbox_egress_flows counter\n", f);
	for (size_t i = 0; c && seen && i < n; i++)
		if (seen[i])
			fprintf(f, "cpuos_sandbox_egress_flows{sandbox=\"%s\"} %llu\n", rows[i].id,
				(unsigned long long)c[i].allowed_flows);
	free(c);
	free(seen);
	store_sbx_free_list(rows, n);
}

int api_metrics(struct req *r)
{
	struct store_sbx_counts c;
	int e = store_sbx_count_by_state(r->api->store, &c);
	if (e < 0)
		return reply_error(r, 500, "internal", "cannot count sandboxes: %s", strerror(-e));
	struct sbx_stats st = {0};
	if (r->api->sbx) /* a harness may serve without a manager */
		sbx_mgr_stats(r->api->sbx, &st);

	char *text = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);
	if (!f)
		return reply_error(r, 500, "internal", "out of memory");
	fputs("# HELP cpuos_sandboxes Sandboxes in the store, by state.\n"
	      "# TYPE cpuos_sandboxes gauge\n",
	      f);
	fprintf(f, "cpuos_sandboxes{state=\"running\"} %u\n", c.running);
	fprintf(f, "cpuos_sandboxes{state=\"paused\"} %u\n", c.paused);
	fprintf(f, "cpuos_sandboxes{state=\"stopped\"} %u\n", c.stopped);
	fprintf(f, "cpuos_sandboxes{state=\"lost\"} %u\n", c.lost);
	metric(f, "cpuos_creates_total", "counter", "Sandboxes created since the daemon started.",
	       st.creates);
	metric(f, "cpuos_cold_boots_total", "counter", "Creates that booted a VM from scratch.",
	       st.cold_boots);
	metric(f, "cpuos_restores_total", "counter", "VMs restored from a snapshot.", st.restores);
	metric(f, "cpuos_pauses_total", "counter", "Sandboxes paused.", st.pauses);
	metric(f, "cpuos_resumes_total", "counter", "Sandboxes resumed.", st.resumes);
	metric(f, "cpuos_forks_total", "counter", "Sandboxes forked.", st.forks);
	metric(f, "cpuos_pool_claims_total", "counter", "Creates served from a warm pool.",
	       st.pool_claims);
	metric(f, "cpuos_pool_depth", "gauge", "Restored VMs waiting in warm pools.",
	       st.pool_depth);
	metric(f, "cpuos_vms_live", "gauge", "VMs this daemon runs now.", st.live);
	summary(f, "cpuos_create_ms", "Time to create a sandbox, in milliseconds.", st.create_ms,
		st.creates);
	summary(f, "cpuos_pause_ms", "Time to pause a sandbox, in milliseconds.", st.pause_ms,
		st.pauses);
	summary(f, "cpuos_resume_ms", "Time to resume a sandbox, in milliseconds.", st.resume_ms,
		st.resumes);
	summary(f, "cpuos_fork_ms", "Time to fork a sandbox, in milliseconds.", st.fork_ms,
		st.forks);
	if (r->api->sbx)
		net_metrics(r, f);
	/* the stream's buffer and size are final only once it is closed */
	int failed = ferror(f);
	if (fclose(f) || failed) {
		free(text);
		return reply_error(r, 500, "internal", "out of memory");
	}
	return reply_buffer(r, 200, METRICS_CONTENT_TYPE, text, n);
}
