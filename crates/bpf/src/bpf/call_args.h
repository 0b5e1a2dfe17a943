// Argument extraction at entry of each probed CUDA runtime, driver and NCCL function (x86-64 SysV).
//
// Integer arguments arrive in rdi, rsi, rdx, rcx, r8, r9, then on the stack at [rsp+8], [rsp+16]
// (on entry, [rsp] is the return address). A dim3 passed by value takes two registers (x|y<<32, z).
// The uprobe cookie carries the op id (low 16 bits) and an auxiliary value (high 32 bits): the
// copy direction of the cuMemcpy* variant the probe is attached to.
#ifndef CAUSEWAY_CALL_ARGS_H
#define CAUSEWAY_CALL_ARGS_H

#include "common.h"

/* What the entry probe saves for the return probe. */
struct call_state {
	__u64 ts;
	__s64 arg0;
	__s64 arg1;
	__u64 out_ptr;  /* user pointer whose pointee becomes arg1 on success (cudaMalloc's void**) */
	__u64 bytes;    /* bytes moved/allocated, for the statistics */
	__u64 stack_hash; /* user stack at entry (stacks.h), 0 = none */
	__u64 sp;       /* user stack pointer at entry (at the return address): pairs the return */
	__u16 mode;     /* the op's probe mode at entry (CW_MODE_*) */
	__u16 op;       /* catalogue op id (from the entry probe's cookie) */
	__u32 slot;     /* the (pid, op) statistics slot (common.h) */
	__u32 gen;      /* the op's return-probe generation at entry (events.h) */
	__u32 pad;
};

static __always_inline __u64 cw_stack_arg(struct pt_regs *ctx, int n)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)(ctx->sp + 8 * n));
	return v;
}

/* Size in bytes of an ncclDataType_t element. */
static __always_inline __u64 cw_nccl_type_size(__u64 t)
{
	switch (t) {
	case 0: case 1: case 10: case 11: return 1;      /* int8, uint8, fp8 e4m3/e5m2 */
	case 6: case 9: return 2;                        /* float16, bfloat16 */
	case 2: case 3: case 7: return 4;                /* int32, uint32, float32 */
	default: return 8;                               /* int64, uint64, float64 */
	}
}

static __always_inline void cw_read_args(struct pt_regs *ctx, __u16 op, __u32 aux, struct call_state *st)
{
	__u64 di = ctx->di, si = ctx->si, dx = ctx->dx, cx = ctx->cx, r8 = ctx->r8, r9 = ctx->r9;

	switch (op) {
	/* ---- CUDA runtime ---- */
	case OP_CUDA_MALLOC:            /* (void **devPtr, size_t size) */
	case OP_CUDA_MALLOC_MANAGED:    /* (void **devPtr, size_t size, unsigned flags) */
	case OP_CU_MEM_ALLOC:           /* (CUdeviceptr *dptr, size_t bytesize) */
	case OP_CU_MEM_ALLOC_MANAGED:   /* (CUdeviceptr *dptr, size_t bytesize, unsigned flags) */
		st->arg0 = si;
		st->bytes = si;
		st->out_ptr = di;
		break;
	case OP_CUDA_FREE:              /* (void *devPtr) */
	case OP_CU_MEM_FREE:            /* (CUdeviceptr dptr) */
	case OP_CUDA_STREAM_SYNC:       /* (cudaStream_t) */
	case OP_CUDA_EVENT_SYNC:        /* (cudaEvent_t) */
	case OP_CU_STREAM_SYNC:         /* (CUstream) */
		st->arg0 = di;
		break;
	case OP_CUDA_GET_KERNEL:        /* (cudaKernel_t *kernel, const void *entryFuncAddr) */
		st->arg0 = si;
		st->out_ptr = di;
		break;
	case OP_CUDA_LAUNCH_KERNEL: {   /* (func, dim3 grid, dim3 block, void **args, size_t shmem, stream) */
		__u64 gx = si & 0xffffffff, gy = si >> 32, gz = dx & 0xffffffff;
		st->arg0 = di;
		st->arg1 = gx * gy * gz;
		break;
	}
	case OP_CUDA_MEMCPY:            /* (dst, src, count, kind) */
	case OP_CUDA_MEMCPY_ASYNC:      /* (dst, src, count, kind, stream) */
		st->arg0 = dx;
		st->arg1 = cx;
		st->bytes = dx;
		break;
	case OP_CUDA_MEMCPY_2D:         /* (dst, dpitch, src, spitch, width, height, kind) */
	case OP_CUDA_MEMCPY_2D_ASYNC:   /* (..., kind, stream) */
		st->arg0 = r8 * r9;
		st->arg1 = cw_stack_arg(ctx, 1);
		st->bytes = r8 * r9;
		break;
	case OP_CUDA_MEMCPY_PEER:       /* (dst, int dstDevice, src, int srcDevice, count) */
	case OP_CUDA_MEMCPY_PEER_ASYNC: /* (..., count, stream) */
		st->arg0 = r8;
		st->arg1 = (__s32)si;
		st->bytes = r8;
		break;
	case OP_CUDA_MEMSET_ASYNC:      /* (devPtr, int value, size_t count, stream) */
		st->arg0 = dx;
		st->arg1 = (__s32)si;
		st->bytes = dx;
		break;
	case OP_GRAPH_LAUNCH:           /* (cudaGraphExec_t, cudaStream_t) */
	case OP_GRAPH_BEGIN_CAPTURE:    /* (cudaStream_t, cudaStreamCaptureMode) */
		st->arg0 = di;
		st->arg1 = si;
		break;
	case OP_GRAPH_END_CAPTURE:      /* (cudaStream_t, cudaGraph_t *pGraph) */
		st->arg0 = di;
		st->out_ptr = si;
		break;
	case OP_GRAPH_INSTANTIATE:      /* (cudaGraphExec_t *pExec, cudaGraph_t graph, flags) */
		st->arg0 = si;
		st->out_ptr = di;
		break;
	/* ---- CUDA driver ---- */
	case OP_CU_MODULE_GET_FUNCTION: /* (CUfunction *hfunc, CUmodule hmod, const char *name) */
	case OP_CU_LIBRARY_GET_KERNEL:  /* (CUkernel *pKernel, CUlibrary library, const char *name) */
		st->arg0 = dx;
		st->out_ptr = di;
		break;
	case OP_CU_KERNEL_GET_FUNCTION: /* (CUfunction *pFunc, CUkernel kernel) */
		st->arg0 = si;
		st->out_ptr = di;
		break;
	case OP_CU_LAUNCH_KERNEL:       /* (f, gridX, gridY, gridZ, blockX, blockY, blockZ, shmem, stream, params, extra) */
		st->arg0 = di;
		st->arg1 = (si & 0xffffffff) * (dx & 0xffffffff) * (cx & 0xffffffff);
		break;
	case OP_CU_LAUNCH_KERNEL_EX: {  /* (const CUlaunchConfig *config, CUfunction f, void **params, void **extra) */
		__u32 grid[3] = {};
		bpf_probe_read_user(grid, sizeof(grid), (void *)di);
		st->arg0 = si;
		st->arg1 = (__u64)grid[0] * grid[1] * grid[2];
		break;
	}
	case OP_CU_MEMCPY:              /* cuMemcpy*_v2 (dst, src, bytes): direction from the cookie */
	case OP_CU_MEMCPY_ASYNC:        /* cuMemcpy*Async_v2 (dst, src, bytes, stream) */
		st->arg0 = dx;
		st->arg1 = aux;
		st->bytes = dx;
		break;
	case OP_CU_CTX_SYNC:
	case OP_CUDA_DEVICE_SYNC:
	case OP_NCCL_GROUP_END:
		break;
	/* ---- NCCL ---- */
	case OP_NCCL_ALL_REDUCE:        /* (send, recv, count, datatype, op, comm, stream) */
	case OP_NCCL_REDUCE_SCATTER:    /* (send, recv, recvcount, datatype, op, comm, stream) */
		st->arg0 = dx * cw_nccl_type_size(cx);
		st->arg1 = r9;
		st->bytes = st->arg0;
		break;
	case OP_NCCL_BROADCAST:         /* (send, recv, count, datatype, root, comm, stream) */
		st->arg0 = dx * cw_nccl_type_size(cx);
		st->arg1 = r9;
		st->bytes = st->arg0;
		break;
	case OP_NCCL_REDUCE:            /* (send, recv, count, datatype, op, root, comm, stream) */
		st->arg0 = dx * cw_nccl_type_size(cx);
		st->arg1 = cw_stack_arg(ctx, 1);
		st->bytes = st->arg0;
		break;
	case OP_NCCL_ALL_GATHER:        /* (send, recv, sendcount, datatype, comm, stream) */
		st->arg0 = dx * cw_nccl_type_size(cx);
		st->arg1 = r8;
		st->bytes = st->arg0;
		break;
	case OP_NCCL_SEND:              /* (buf, count, datatype, int peer, comm, stream) */
	case OP_NCCL_RECV:
		st->arg0 = si * cw_nccl_type_size(dx);
		st->arg1 = (__s32)cx;
		st->bytes = st->arg0;
		break;
	default:
		break;
	}
}

#endif
