"""The error texts workers print in the recordings, as torch, NCCL, gloo and CUDA word them."""

NCCL_PEER = ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
             "remote process exited or there was a network error, NCCL version 2.19.3")
GLOO_PEER = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection "
             "closed by peer [10.0.0.12]:23456")
NCCL_TIMEOUT = ("torch.distributed.DistBackendError: [Rank 3] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, Timeout(ms)=600000)")
CUDA_IMA = "RuntimeError: CUDA error: an illegal memory access was encountered"
CUDA_LAUNCH = "RuntimeError: CUDA error: unspecified launch failure"
CUDA_ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
