/*
 * sbx_metrics: a sample of each running sandbox every SBX_METRICS_MS, the
 * last SBX_SAMPLES of them kept per sandbox. CPU comes from the host: the
 * time its QEMU process was given (/proc/PID/stat), over its vCPUs, so a
 * guest cannot make itself look idle. Memory, disk and network come from
 * the guest's agent (P_STATS), as the guest counts them: what a user of the
 * sandbox sees with free, df and ip. A sample's asking the agent is not
 * activity of the sandbox's own (sbx_idle).
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/clock.h"
#include "common/log.h"
#include "runner/vm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STATS_WAIT_MS 2000 /* an agent slower than that gives no guest figures */

/* utime + stime of process pid in clock ticks: 0, or -errno. */
static int qemu_ticks(int pid, unsigned long long *ticks)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	/* The command may hold spaces and parentheses: fields restart after
	 * the last ')'. Then state is field 3, utime 14, stime 15. */
	char *p = strrchr(buf, ')');
	unsigned long long ut, st;
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -EIO;
	*ticks = ut + st;
	return 0;
}

/* One sample of s, kept in its ring. */
static void sample(struct sbx *s)
{
	struct sbx_sample x = { .at_ms = (long long)(clock_realtime_ns() / 1000000), .cpu_pct = -1,
				.ncpu = s->vcpus };
	pthread_mutex_lock(&s->mu);
	int pid = s->running && s->vm ? (int)vm_pid(s->vm) : 0;
	pthread_mutex_unlock(&s->mu);
	if (pid <= 0)
		return;
	unsigned long long ticks = 0;
	int have_ticks = qemu_ticks(pid, &ticks) == 0;
	long long mono = clock_ms();

	struct sop *op = sop_new(SOP_COLLECT, 0);
	if (op)
		op->quiet = 1;
	struct sbx_request q = { .kind = SBX_STATS };
	struct sop_state st = { 0 };
	if (op && sbx_request(s, op, &q) == 0 && sbx_wait(s, op, 0, STATS_WAIT_MS, &st) == 0 &&
	    st.end == P_OK && st.stats.mem_total) {
		x.mem_total = st.stats.mem_total;
		x.mem_used = st.stats.mem_total > st.stats.mem_avail
				     ? st.stats.mem_total - st.stats.mem_avail : 0;
		x.disk_total = st.stats.disk_total;
		x.disk_used = st.stats.disk_used;
		x.net_rx = st.stats.net_rx;
		x.net_tx = st.stats.net_tx;
		x.guest = 1;
	}
	sop_free(s, op);

	pthread_mutex_lock(&s->mu);
	/* A new QEMU (a resume) starts its count again. */
	if (have_ticks && s->m_pid == pid && mono > s->m_at && ticks >= s->m_ticks) {
		long hz = sysconf(_SC_CLK_TCK);
		double used_ms = (double)(ticks - s->m_ticks) * 1000.0 / (double)(hz > 0 ? hz : 100);
		double pct = 100.0 * used_ms / ((double)(mono - s->m_at) * (s->vcpus ? s->vcpus : 1));
		x.cpu_pct = pct > 100.0 ? 100.0 : pct;
	}
	/* Working on its own: in use until a sample says otherwise. */
	atomic_store(&s->cpu_busy, x.cpu_pct >= SBX_IDLE_CPU_PCT);
	atomic_store(&s->sampled_ms, mono);
	if (x.cpu_pct >= SBX_IDLE_CPU_PCT)
		atomic_store(&s->active_ms, clock_ms());
	if (have_ticks) {
		s->m_pid = pid;
		s->m_ticks = ticks;
		s->m_at = mono;
	}
	if (!s->samples)
		s->samples = calloc(SBX_SAMPLES, sizeof(*s->samples));
	if (s->samples && x.cpu_pct >= 0) {
		s->samples[s->m_head] = x;
		s->m_head = (s->m_head + 1) % SBX_SAMPLES;
		if (s->m_count < SBX_SAMPLES)
			s->m_count++;
	}
	pthread_mutex_unlock(&s->mu);
}

void sbx__metrics_baseline(struct sbx *s, int pid)
{
	unsigned long long ticks;
	atomic_store(&s->cpu_busy, 0);
	atomic_store(&s->sampled_ms, clock_ms());
	if (pid > 0 && qemu_ticks(pid, &ticks) == 0) {
		s->m_pid = pid;
		s->m_ticks = ticks;
		s->m_at = clock_ms();
	}
}

static int running(const struct sbx *s, const void *arg)
{
	(void)arg;
	return s->state == SBX_RUNNING;
}

static void *sampler_main(void *arg)
{
	struct sbx_mgr *m = arg;
	log_set_tag("metrics");
	for (;;) {
		struct sbx **v;
		size_t n = sbx__each(m, running, NULL, &v);
		for (size_t i = 0; i < n; i++)
			sample(v[i]);
		sbx__put_all(v, n);
		struct timespec until;
		clock_deadline(&until, SBX_METRICS_MS);
		pthread_mutex_lock(&m->mu);
		while (!m->quit && pthread_cond_timedwait(&m->quit_cv, &m->mu, &until) != ETIMEDOUT)
			;
		int quit = m->quit;
		pthread_mutex_unlock(&m->mu);
		if (quit)
			return NULL;
	}
}

int sbx__metrics_start(struct sbx_mgr *m)
{
	return pthread_create(&m->sampler, NULL, sampler_main, m) == 0 ? 0 : -EAGAIN;
}

void sbx__metrics_join(struct sbx_mgr *m)
{
	pthread_join(m->sampler, NULL);
}

int sbx_metrics(struct sbx_mgr *m, const char *id, const char *account, struct sbx_sample *out,
		size_t max)
{
	struct sbx *s = sbx__get(m, id);
	if (!s || (account && strcmp(s->account, account))) {
		sbx_put(s);
		return -ENOENT;
	}
	pthread_mutex_lock(&s->mu);
	size_t n = s->m_count < max ? s->m_count : max;
	for (size_t i = 0; i < n; i++)
		out[i] = s->samples[(s->m_head + SBX_SAMPLES - n + i) % SBX_SAMPLES];
	pthread_mutex_unlock(&s->mu);
	sbx_put(s);
	return (int)n;
}
