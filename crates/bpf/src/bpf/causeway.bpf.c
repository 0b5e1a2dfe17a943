// The causeway BPF object: one compilation unit that pulls in every program file (one per concern).
//
// A single object keeps the maps (targets, stats, drops, the ring buffer) shared by all programs
// without pinning; user space attaches only the programs a trace needs (see collector/).
#include "calls.h"
#include "sched.h"
#include "proc.h"
#include "block.h"
#include "net.h"
#include "nvtx.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";
