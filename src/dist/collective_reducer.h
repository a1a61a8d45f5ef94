#pragma once
// The multi-process GradientReducer on PyTorch's own distributed engine (c10d): a TCP store
// on rank 0 for the rendezvous, Gloo for CPU tensors (NCCL for CUDA tensors in CUDA builds of
// libtorch). Gradients live in flat buckets from the start (each parameter's .grad is a view
// into one), so the once-per-update all-reduce needs no copies; the window's counts (samples,
// items, loss sum, correct predictions) ride along at the end of the last bucket, so they cost
// no extra call.
//
//   CollectiveOptions options;
//   options.timeout_seconds = 300;
//   auto reducer = make_collective_reducer(*env, options);
//   AccumulationEngine engine(model, *optimizer, *reducer, EngineOptions{});
#include <cstdint>
#include <memory>

#include "dist/environment.h"
#include "dist/gradient_reducer.h"

namespace bigbatch {

struct CollectiveOptions {
  double timeout_seconds = 300;              // rendezvous and every collective
  int64_t bucket_bytes = int64_t{25} << 20;  // DDP's default bucket size
};

// Joins the process group described by `env` (blocks until every rank has joined, or fails
// with a bigbatch::Error (Distributed) after the timeout).
std::unique_ptr<GradientReducer> make_collective_reducer(const DistEnvironment& env,
                                                         const CollectiveOptions& options);

}  // namespace bigbatch
