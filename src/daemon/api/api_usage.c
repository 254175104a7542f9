/*
 * api_usage: metering. GET /v1/usage integrates the store's usage events
 * over a window and prices them; GET /metrics is the daemon's counters in
 * the Prometheus text format (0.0.4).
 */
#include "daemon/api/api.h"

#include "daemon/net/net.h"

#include "common/clock.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Each running sandbox's newest sample (admin only: a series per sandbox). */
static void sandbox_metrics(struct req *r, FILE *f)
{
	struct store_sbx *rows;
	size_t n;
	if (store_sbx_running(r->api->store, &rows, &n) < 0)
		return;
	struct sbx_sample *x = calloc(n ? n : 1, sizeof(*x));
	int *have = calloc(n ? n : 1, sizeof(*have));
	for (size_t i = 0; x && have && i < n; i++)
		have[i] = sbx_metrics(r->api->sbx, rows[i].id, NULL, &x[i], 1) == 1;
	static const struct {
		const char *name, *help;
		size_t off;
	} series[] = {
		{ "cpuos_sandbox_memory_used_bytes", "Memory its guest uses.",
		  offsetof(struct sbx_sample, mem_used) },
		{ "cpuos_sandbox_memory_total_bytes", "Memory its guest has.",
		  offsetof(struct sbx_sample, mem_total) },
		{ "cpuos_sandbox_disk_used_bytes", "Disk its guest uses.",
		  offsetof(struct sbx_sample, disk_used) },
		{ "cpuos_sandbox_disk_total_bytes", "Disk its guest has.",
		  offsetof(struct sbx_sample, disk_total) },
		{ "cpuos_sandbox_network_receive_bytes", "Bytes its guest received.",
		  offsetof(struct sbx_sample, net_rx) },
		{ "cpuos_sandbox_network_transmit_bytes", "Bytes its guest sent.",
		  offsetof(struct sbx_sample, net_tx) },
	};
	fputs("# HELP cpuos_sandbox_cpu_used_percent CPU its QEMU used over the last interval, "
	      "of its vCPUs.\n# TYPE cpuos_sandbox_cpu_used_percent gauge\n", f);
	for (size_t i = 0; x && have && i < n; i++)
		if (have[i])
			fprintf(f, "cpuos_sandbox_cpu_used_percent{sandbox=\"%s\"} %.1f\n", rows[i].id,
				x[i].cpu_pct);
	for (size_t k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", series[k].name, series[k].help,
			series[k].name);
		for (size_t i = 0; x && have && i < n; i++)
			if (have[i] && x[i].guest)
				fprintf(f, "%s{sandbox=\"%s\"} %llu\n", series[k].name, rows[i].id,
					*(const unsigned long long *)((const char *)&x[i] +
								      series[k].off));
	}
	free(x);
	free(have);
	store_sbx_free_list(rows, n);
}

/* The daemon's own counters (admin only). */
static void daemon_metrics(FILE *f, const struct sbx_stats *s)
{
	metric(f, "cpuos_creates_total", "counter", "Sandboxes created since the daemon started.",
	       s->creates);
	metric(f, "cpuos_cold_boots_total", "counter", "Creates that booted a VM from scratch.",
	       s->cold_boots);
	metric(f, "cpuos_restores_total", "counter", "VMs restored from a snapshot.", s->restores);
	metric(f, "cpuos_pauses_total", "counter", "Sandboxes paused.", s->pauses);
	metric(f, "cpuos_resumes_total", "counter", "Sandboxes resumed.", s->resumes);
	metric(f, "cpuos_forks_total", "counter", "Sandboxes forked.", s->forks);
	metric(f, "cpuos_pool_claims_total", "counter", "Creates served from a warm pool.",
	       s->pool_claims);
	metric(f, "cpuos_pool_depth", "gauge", "Restored VMs waiting in warm pools.",
	       s->pool_depth);
	metric(f, "cpuos_vms_live", "gauge", "VMs this daemon runs now.", s->live);
	summary(f, "cpuos_create_ms", "Time to create a sandbox, in milliseconds.", s->create_ms,
		s->creates);
	summary(f, "cpuos_pause_ms", "Time to pause a sandbox, in milliseconds.", s->pause_ms,
		s->pauses);
	summary(f, "cpuos_resume_ms", "Time to resume a sandbox, in milliseconds.", s->resume_ms,
		s->resumes);
	summary(f, "cpuos_fork_ms", "Time to fork a sandbox, in milliseconds.", s->fork_ms,
		s->forks);
}

int api_metrics(struct req *r)
{
	struct store_sbx_counts c;
	/* A key sees its own account's sandboxes; the daemon's counters and the
	 * series of every sandbox are the socket's (the administrator's). */
	int e = store_sbx_count_by_state(r->api->store, r->admin ? NULL : r->account, &c);
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
	if (r->admin)
		daemon_metrics(f, &st);
	if (r->api->sbx)
		net_metrics(r, f);
	if (r->api->sbx && r->admin)
		sandbox_metrics(r, f);
	/* the stream's buffer and size are final only once it is closed */
	int failed = ferror(f);
	if (fclose(f) || failed) {
		free(text);
		return reply_error(r, 500, "internal", "out of memory");
	}
	return reply_buffer(r, 200, METRICS_CONTENT_TYPE, text, n);
}

/* ---- GET /v1/sandboxes/{id}/metrics, GET /v1/sandboxes/metrics ---- */

static json_t *sample_json(const struct sbx_sample *x)
{
	char at[64];
	time_t t = (time_t)(x->at_ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	snprintf(at, sizeof(at), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(x->at_ms % 1000));
	json_t *o = json_pack("{s:s,s:i,s:f}", "timestamp", at, "cpu_count", (int)x->ncpu,
			      "cpu_used_pct", (double)(long long)(x->cpu_pct * 10 + 0.5) / 10);
	static const char *const names[] = { "mem_used", "mem_total", "disk_used", "disk_total",
					     "net_rx_bytes", "net_tx_bytes" };
	const unsigned long long v[] = { x->mem_used, x->mem_total, x->disk_used,
					 x->disk_total, x->net_rx, x->net_tx };
	for (size_t i = 0; o && i < sizeof(v) / sizeof(v[0]); i++)
		json_object_set_new(o, names[i], x->guest ? json_integer((json_int_t)v[i]) : json_null());
	return o;
}

int api_sbx_metrics(struct req *r)
{
	long long limit = SBX_SAMPLES;
	const char *ls = req_query(r, "limit", NULL);
	if (ls) {
		char *end;
		limit = strtoll(ls, &end, 10);
		if (!*ls || *end || limit < 1 || limit > SBX_SAMPLES)
			return reply_error(r, 400, "bad_request", "limit must be an integer from 1 to %d",
					   SBX_SAMPLES);
	}
	struct store_sbx row;
	if (api_row(r, &row) < 0)
		return 0;
	store_sbx_release(&row);
	/* Never resumes it: a paused sandbox shows the samples it had. */
	struct sbx_sample x[SBX_SAMPLES];
	int n = sbx_metrics(r->api->sbx, r->param[0], r->admin ? NULL : r->account, x, (size_t)limit);
	json_t *a = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, sample_json(&x[i]));
	return reply_json(r, 200, json_pack("{s:i,s:o}", "interval_ms", SBX_METRICS_MS, "metrics", a));
}

#define MAX_METRICS_IDS 100

int api_sbxs_metrics(struct req *r)
{
	const char *ids = req_query(r, "ids", NULL);
	char *list = NULL;
	struct store_sbx *rows = NULL;
	size_t nrows = 0;
	json_t *out = json_array();
	if (ids) {
		/* The ids asked for: those the caller may not see are left out. */
		list = strdup(ids);
		size_t k = 0;
		char *save = NULL;
		for (char *id = list ? strtok_r(list, ",", &save) : NULL; id;
		     id = strtok_r(NULL, ",", &save)) {
			if (++k > MAX_METRICS_IDS) {
				free(list);
				json_decref(out);
				return reply_error(r, 400, "bad_request", "at most %d ids", MAX_METRICS_IDS);
			}
			struct sbx_sample x;
			if (sbx_metrics(r->api->sbx, id, r->admin ? NULL : r->account, &x, 1) == 1)
				json_array_append_new(out, json_pack("{s:s,s:o}", "sandbox_id", id,
								     "metrics", sample_json(&x)));
		}
	} else if (store_sbx_running(r->api->store, &rows, &nrows) == 0) {
		for (size_t i = 0; i < nrows; i++) {
			struct sbx_sample x;
			if ((r->admin || !strcmp(rows[i].account, r->account)) &&
			    sbx_metrics(r->api->sbx, rows[i].id, NULL, &x, 1) == 1)
				json_array_append_new(out, json_pack("{s:s,s:o}", "sandbox_id", rows[i].id,
								     "metrics", sample_json(&x)));
		}
		store_sbx_free_list(rows, nrows);
	}
	free(list);
	return reply_json(r, 200, json_pack("{s:i,s:o}", "interval_ms", SBX_METRICS_MS, "sandboxes", out));
}
