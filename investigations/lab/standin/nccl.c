// The lab's stand-in NCCL (libnccl.so.2): NCCL's real names and signatures; ranks are processes
// on this machine that rendezvous over a Unix socket, so a collective really waits for every
// rank. The model (device.h): a collective meets every rank (rank 0 collects one message per
// rank and releases them all: a rank that calls early waits inside the call, blocked reading
// its socket), then queues the transfer as device work that starts when the last rank's
// stream has reached the collective. No data is reduced or moved.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "device.h"

typedef int ncclResult_t;
typedef struct {
	char internal[128];
} ncclUniqueId;

enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInvalidArgument = 4 };

struct lab_comm {
	int rank, nranks, dev;
	int *fds; /* rank 0: a socket per other rank; others: fds[0], the socket to rank 0 */
	unsigned long long seq;
};
typedef struct lab_comm *ncclComm_t;

struct msg {
	unsigned long long seq, bytes;
	unsigned long long ready; /* when the sender's stream reaches the collective; from rank 0: the latest */
};

static const struct lab_dev_api *A;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load_driver(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	const struct lab_dev_api *(*get)(int) = h ? (const struct lab_dev_api *(*)(int))dlsym(h, "labdevGetTable") : NULL;
	A = get ? get(LAB_DEV_API_VERSION) : NULL;
	if (!A)
		fprintf(stderr, "libnccl (lab): cannot load the lab's libcuda.so.1\n");
}

static const struct lab_dev_api *api(void)
{
	pthread_once(&once, load_driver);
	return A;
}

static double nccl_bytes_per_ns(void)
{
	const char *v = getenv("LAB_NCCL_GBPS");
	return v && *v ? atof(v) : 100.0;
}

static int full_io(int fd, void *buf, size_t n, int writing)
{
	char *p = buf;
	while (n) {
		ssize_t r = writing ? write(fd, p, n) : read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static socklen_t addr_of(const ncclUniqueId *id, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof *sa);
	sa->sun_family = AF_UNIX;
	/* abstract namespace: nothing on disk to clean up */
	size_t n = strnlen(id->internal, sizeof id->internal);
	if (n > sizeof sa->sun_path - 2)
		n = sizeof sa->sun_path - 2;
	memcpy(sa->sun_path + 1, id->internal, n);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

ncclResult_t ncclGetVersion(int *version)
{
	*version = 22005;
	return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	memset(uniqueId, 0, sizeof *uniqueId);
	snprintf(uniqueId->internal, sizeof uniqueId->internal, "lab-nccl-%d-%lld%09ld", (int)getpid(),
		 (long long)ts.tv_sec, ts.tv_nsec);
	return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	const struct lab_dev_api *a = api();
	if (!a)
		return ncclUnhandledCudaError;
	if (nranks < 1 || rank < 0 || rank >= nranks)
		return ncclInvalidArgument;
	struct lab_comm *c = calloc(1, sizeof *c);
	c->rank = rank;
	c->nranks = nranks;
	c->dev = a->get_device();
	c->fds = calloc((size_t)nranks, sizeof(int));
	struct sockaddr_un sa;
	socklen_t len = addr_of(&commId, &sa);
	if (rank == 0) {
		int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (ls < 0 || bind(ls, (struct sockaddr *)&sa, len) != 0 || listen(ls, nranks) != 0)
			return ncclSystemError;
		for (int i = 1; i < nranks; i++) {
			int fd = accept(ls, NULL, NULL);
			int r = -1;
			if (fd < 0 || full_io(fd, &r, sizeof r, 0) != 0 || r <= 0 || r >= nranks)
				return ncclSystemError;
			c->fds[r] = fd;
		}
		close(ls);
	} else {
		int fd = -1;
		/* rank 0 may not listen yet: retry for up to a minute */
		for (int tries = 0; tries < 6000; tries++) {
			fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (connect(fd, (struct sockaddr *)&sa, len) == 0)
				break;
			close(fd);
			fd = -1;
			usleep(10000);
		}
		if (fd < 0 || full_io(fd, &rank, sizeof rank, 1) != 0)
			return ncclSystemError;
		c->fds[0] = fd;
	}
	*comm = c;
	return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess;
	for (int i = 0; i < comm->nranks; i++)
		if (comm->fds[i] > 0)
			close(comm->fds[i]);
	free(comm->fds);
	free(comm);
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	*count = comm->nranks;
	return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	*rank = comm->rank;
	return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
	*device = comm->dev;
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess:
		return "no error";
	case ncclUnhandledCudaError:
		return "unhandled cuda error";
	case ncclSystemError:
		return "unhandled system error";
	case ncclInvalidArgument:
		return "invalid argument";
	default:
		return "unknown result code";
	}
}

static size_t type_size(int datatype)
{
	static const size_t sizes[] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2 };
	return datatype >= 0 && datatype < 10 ? sizes[datatype] : 0;
}

/* Every rank arrives, then all go: a star through rank 0. *ready: this rank's stream's arrival
 * on entry, the latest rank's on return. */
static int rendezvous(struct lab_comm *c, unsigned long long bytes, unsigned long long *ready)
{
	struct msg m = { ++c->seq, bytes, *ready };
	if (c->rank != 0) {
		if (full_io(c->fds[0], &m, sizeof m, 1) || full_io(c->fds[0], &m, sizeof m, 0))
			return -1;
		*ready = m.ready;
		return 0;
	}
	for (int r = 1; r < c->nranks; r++) {
		struct msg in;
		if (full_io(c->fds[r], &in, sizeof in, 0) || in.seq != m.seq)
			return -1;
		if (in.ready > m.ready)
			m.ready = in.ready;
	}
	*ready = m.ready;
	for (int r = 1; r < c->nranks; r++)
		if (full_io(c->fds[r], &m, sizeof m, 1))
			return -1;
	return 0;
}

/* A collective moving `bus_bytes` per rank over the links: meet every rank, queue the transfer
 * after the last rank's stream has reached it. */
static ncclResult_t collective(struct lab_comm *c, void *stream, double bus_bytes);

/* Collectives issued between ncclGroupStart and ncclGroupEnd run at ncclGroupEnd. */
struct deferred {
	struct lab_comm *c;
	void *stream;
	double bus_bytes;
};
static __thread int group_depth;
static __thread struct deferred group_ops[64];
static __thread int n_group_ops;

static ncclResult_t run(struct lab_comm *c, void *stream, double bus_bytes)
{
	if (!c)
		return ncclInvalidArgument;
	if (group_depth > 0) {
		if (n_group_ops == 64)
			return ncclInvalidArgument;
		group_ops[n_group_ops++] = (struct deferred){ c, stream, bus_bytes };
		return ncclSuccess;
	}
	return collective(c, stream, bus_bytes);
}

static ncclResult_t collective(struct lab_comm *c, void *stream, double bus_bytes)
{
	const struct lab_dev_api *a = api();
	if (!a)
		return ncclUnhandledCudaError;
	int prev = a->get_device();
	a->set_device(c->dev);
	unsigned long long ready = a->stream_ready(stream);
	int rc = rendezvous(c, (unsigned long long)bus_bytes, &ready);
	a->enqueue(stream, LAB_COMPUTE, 20000 + (unsigned long long)(bus_bytes / nccl_bytes_per_ns()), ready);
	a->set_device(prev);
	return rc ? ncclSystemError : ncclSuccess;
}

static double ring(const struct lab_comm *c, double bytes) { return c ? 2.0 * (c->nranks - 1) / c->nranks * bytes : 0; }

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op, ncclComm_t comm,
			   void *stream)
{
	(void)sendbuff;
	(void)recvbuff;
	(void)op;
	return run(comm, stream, ring(comm, (double)count * (double)type_size(datatype)));
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, int datatype, int root,
			   ncclComm_t comm, void *stream)
{
	(void)sendbuff;
	(void)recvbuff;
	(void)root;
	return run(comm, stream, (double)count * (double)type_size(datatype));
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op, int root,
			ncclComm_t comm, void *stream)
{
	(void)sendbuff;
	(void)recvbuff;
	(void)op;
	(void)root;
	return run(comm, stream, (double)count * (double)type_size(datatype));
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, int datatype, ncclComm_t comm,
			   void *stream)
{
	(void)sendbuff;
	(void)recvbuff;
	return run(comm, stream, comm ? (double)(comm->nranks - 1) * (double)sendcount * (double)type_size(datatype) : 0);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, int datatype, int op,
			       ncclComm_t comm, void *stream)
{
	(void)sendbuff;
	(void)recvbuff;
	(void)op;
	return run(comm, stream, comm ? (double)(comm->nranks - 1) * (double)recvcount * (double)type_size(datatype) : 0);
}

ncclResult_t ncclGroupStart(void)
{
	group_depth++;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	if (group_depth == 0)
		return ncclInvalidArgument;
	if (--group_depth > 0)
		return ncclSuccess;
	ncclResult_t rc = ncclSuccess;
	for (int i = 0; i < n_group_ops; i++) {
		ncclResult_t r = collective(group_ops[i].c, group_ops[i].stream, group_ops[i].bus_bytes);
		if (r != ncclSuccess)
			rc = r;
	}
	n_group_ops = 0;
	return rc;
}
