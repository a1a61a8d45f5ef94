#pragma once
// In-memory image-classification datasets as tensors, and the assembly of micro-batches from
// positions in the epoch order into preallocated buffers (no allocation per micro-step).
//
//   DatasetSplits data = load_idx_dataset(dir, /*train_subset=*/0, /*val_size=*/5000);
//   BatchAssembler assembler(data.train, /*capacity=*/32);
//   Batch batch = assembler.gather(order, /*begin=*/0, /*count=*/32);
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

// Fashion-MNIST's training-set pixel mean and standard deviation (of pixel / 255).
inline constexpr double kPixelMean = 0.2860;
inline constexpr double kPixelStd = 0.3530;
inline constexpr int64_t kIdxClasses = 10;

struct TensorDataset {
  torch::Tensor inputs;   // [N, 1, H, W] float32, normalised
  torch::Tensor targets;  // [N] int64 class labels
  int64_t size() const { return inputs.defined() ? inputs.size(0) : 0; }
  TensorDataset slice(int64_t begin, int64_t end) const;
};

struct DatasetSplits {
  TensorDataset train;
  TensorDataset validation;  // empty unless val_size > 0
  TensorDataset test;
};

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `directory`. train_subset > 0
// keeps the first N training samples; val_size > 0 then holds out the last val_size of them.
DatasetSplits load_idx_dataset(const std::string& directory, int64_t train_subset,
                               int64_t val_size);

struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
  int64_t size() const { return targets.size(0); }
};

// Gathers the samples at order[begin, begin + count) into buffers reused across calls.
// The returned tensors are views of those buffers, valid until the next gather().
class BatchAssembler {
 public:
  BatchAssembler(const TensorDataset& dataset, int64_t capacity);
  Batch gather(const std::vector<int64_t>& order, int64_t begin, int64_t count);

 private:
  const TensorDataset& dataset_;
  torch::Tensor input_buffer_;
  torch::Tensor target_buffer_;
};

}  // namespace bigbatch
