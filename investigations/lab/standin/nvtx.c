//! The lab's stand-in libnvToolsExt: the NVTX calls torch.cuda.nvtx makes, over NVTX v3's loader.
//
// PyTorch's torch.cuda.nvtx.range_push/range_pop/mark end in nvtxRangePushA, nvtxRangePop and
// nvtxMarkA, compiled from NVTX v3's header-only loader; pip's nvidia-nvtx wheel ships the same
// names as nvidia/nvtx/lib/libnvToolsExt.so.1. This library exports those names, and its body is
// that loader (crates/collector/nvtx/loader.h, shared with the collector's NVTX test program): the
// calls are no-ops until the process names an injection library in NVTX_INJECTION64_PATH, which
// `causeway trace` does, and then they go to the injected handlers.
#include "loader.h"

int nvtxRangePushA(const char *message)
{
	return nvtx_push_a(message);
}

int nvtxRangePop(void)
{
	return nvtx_pop();
}

void nvtxMarkA(const char *message)
{
	nvtx_mark_a(message);
}
