// A program calling NVIDIA's real NCCL (libnccl.so.2 from the PyPI wheel, see scripts/deps.sh)
// in a known pattern, for the collector's tests of the NCCL probes on the real library. Without
// a communicator (NULL) every collective fails with ncclInvalidArgument after entering and
// leaving the real function, which is all the probes need. The prototypes are NCCL's
// (ncclResult_t, ncclDataType_t and ncclRedOp_t are int enums).
//
//   nccl OUT  one call of each probed collective and point-to-point call inside a group;
//             writes "op return-code" per call to OUT.
#include <stddef.h>
#include <stdio.h>

typedef void *ncclComm_t;
typedef void *cudaStream_t;

extern int ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
			 ncclComm_t comm, cudaStream_t stream);
extern int ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, int datatype,
			 int root, ncclComm_t comm, cudaStream_t stream);
extern int ncclReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
		      int root, ncclComm_t comm, cudaStream_t stream);
extern int ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, int datatype,
			 ncclComm_t comm, cudaStream_t stream);
extern int ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
			     int datatype, int op, ncclComm_t comm, cudaStream_t stream);
extern int ncclSend(const void *sendbuff, size_t count, int datatype, int peer, ncclComm_t comm,
		    cudaStream_t stream);
extern int ncclRecv(void *recvbuff, size_t count, int datatype, int peer, ncclComm_t comm,
		    cudaStream_t stream);
extern int ncclGroupStart(void);
extern int ncclGroupEnd(void);

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: nccl OUT\n");
		return 2;
	}
	FILE *out = fopen(argv[1], "w");
	if (!out)
		return 1;
	static char buf[1 << 16];
	/* ncclDataType_t: int8 0, uint8 1, int32 2, float16 6, float32 7, float64 8, bfloat16 9 */
	fprintf(out, "ncclAllReduce %d\n", ncclAllReduce(buf, buf, 1024, 7, 0, 0, 0));
	fprintf(out, "ncclBroadcast %d\n", ncclBroadcast(buf, buf, 256, 0, 0, 0, 0));
	fprintf(out, "ncclReduce %d\n", ncclReduce(buf, buf, 512, 6, 0, 0, 0, 0));
	fprintf(out, "ncclAllGather %d\n", ncclAllGather(buf, buf, 128, 8, 0, 0));
	fprintf(out, "ncclReduceScatter %d\n", ncclReduceScatter(buf, buf, 64, 9, 0, 0, 0));
	fprintf(out, "ncclGroupStart %d\n", ncclGroupStart());
	fprintf(out, "ncclSend %d\n", ncclSend(buf, 100, 2, 3, 0, 0));
	fprintf(out, "ncclRecv %d\n", ncclRecv(buf, 50, 1, 5, 0, 0));
	fprintf(out, "ncclGroupEnd %d\n", ncclGroupEnd());
	return fclose(out) == 0 ? 0 : 1;
}
