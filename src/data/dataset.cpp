#include "data/dataset.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/files.h"
#include "data/idx_reader.h"

namespace bigbatch {

TensorDataset TensorDataset::slice(int64_t begin, int64_t end) const {
  return {inputs.slice(0, begin, end), targets.slice(0, begin, end)};
}

namespace {

std::string find_file(const std::string& directory, const std::string& stem) {
  for (const std::string& candidate : {directory + "/" + stem + ".gz", directory + "/" + stem}) {
    if (path_exists(candidate))
      return candidate;
  }
  throw Error(ErrorKind::Data, "dataset file '" + stem + "[.gz]' not found in '" + directory + "'",
              directory.find("fashion-mnist") != std::string::npos
                  ? "install it with: apt-get install dataset-fashion-mnist"
                  : "point --dataset idx:DIR at a directory with MNIST-format files");
}

TensorDataset load_split(const std::string& directory, const std::string& prefix) {
  const std::string image_path = find_file(directory, prefix + "-images-idx3-ubyte");
  const std::string label_path = find_file(directory, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx_file(image_path);
  IdxArray labels = read_idx_file(label_path);
  if (images.dims.size() != 3) {
    throw Error(ErrorKind::Data,
                "IDX file '" + image_path + "' has " + std::to_string(images.dims.size()) +
                    " dimensions, images need 3 (count, height, width)",
                "check that the images and labels files are not swapped");
  }
  if (labels.dims.size() != 1) {
    throw Error(ErrorKind::Data,
                "IDX file '" + label_path + "' has " + std::to_string(labels.dims.size()) +
                    " dimensions, labels need 1",
                "check that the images and labels files are not swapped");
  }
  if (images.count() != labels.count()) {
    throw Error(ErrorKind::Data,
                "'" + image_path + "' holds " + std::to_string(images.count()) + " images but '" +
                    label_path + "' holds " + std::to_string(labels.count()) + " labels",
                "use files from the same dataset release");
  }
  if (images.count() == 0 || images.dims[1] == 0 || images.dims[2] == 0) {
    throw Error(ErrorKind::Data, "IDX file '" + image_path + "' holds no pixels",
                "use a non-empty dataset");
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kIdxClasses) {
      throw Error(ErrorKind::Data,
                  "label " + std::to_string(labels.data[i]) + " of sample " + std::to_string(i) +
                      " in '" + label_path + "' is out of range (classes are 0 to " +
                      std::to_string(kIdxClasses - 1) + ")",
                  "the labels file is corrupt or belongs to another dataset");
    }
  }
  const int64_t n = images.count();
  auto pixels =
      torch::from_blob(images.data.data(), {n, 1, images.dims[1], images.dims[2]}, torch::kUInt8);
  TensorDataset out;
  out.inputs = pixels.to(torch::kFloat32).div_(255.0).sub_(kPixelMean).div_(kPixelStd);
  out.targets = torch::from_blob(labels.data.data(), {n}, torch::kUInt8).to(torch::kInt64);
  return out;
}

}  // namespace

DatasetSplits load_idx_dataset(const std::string& directory, int64_t train_subset,
                               int64_t val_size) {
  DatasetSplits splits;
  splits.train = load_split(directory, "train");
  splits.test = load_split(directory, "t10k");
  if (train_subset > 0) {
    if (train_subset > splits.train.size()) {
      throw Error(
          ErrorKind::Config,
          "--train-subset " + std::to_string(train_subset) + " is larger than the training set (" +
              std::to_string(splits.train.size()) + " samples)",
          "use --train-subset " + std::to_string(splits.train.size()) + " or less, or 0 for all");
    }
    splits.train = splits.train.slice(0, train_subset);
  }
  if (val_size > 0) {
    const int64_t n = splits.train.size();
    if (val_size >= n) {
      throw Error(ErrorKind::Config,
                  "--val-size " + std::to_string(val_size) + " leaves no training samples (" +
                      std::to_string(n) + " available)",
                  "use a --val-size below " + std::to_string(n));
    }
    splits.validation = splits.train.slice(n - val_size, n);
    splits.train = splits.train.slice(0, n - val_size);
  }
  return splits;
}

BatchAssembler::BatchAssembler(const TensorDataset& dataset, int64_t capacity, bool background)
    : dataset_(dataset) {
  std::vector<int64_t> input_shape = {capacity};
  for (int64_t d = 1; d < dataset.inputs.dim(); ++d)
    input_shape.push_back(dataset.inputs.size(d));
  for (Slot& slot : slots_) {
    slot.inputs = torch::empty(input_shape, dataset.inputs.options());
    slot.targets = torch::empty({capacity}, dataset.targets.options());
  }
  // Rows are copied as bytes, which needs rows laid out one after another.
  BB_INTERNAL_ASSERT(dataset.inputs.is_contiguous() && dataset.targets.is_contiguous(),
                     "the batch assembler needs contiguous dataset tensors");
  if (background)
    worker_ = std::thread([this] { work(); });
}

BatchAssembler::~BatchAssembler() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    worker_.join();
  }
}

void BatchAssembler::copy_into(Slot& slot, const int64_t* index, int64_t count) {
  const int64_t n = dataset_.inputs.size(0);
  const size_t input_row =
      size_t(dataset_.inputs.numel() / std::max<int64_t>(1, n)) * dataset_.inputs.element_size();
  const size_t target_row = dataset_.targets.element_size();
  const auto* inputs = static_cast<const char*>(dataset_.inputs.data_ptr());
  const auto* targets = static_cast<const char*>(dataset_.targets.data_ptr());
  auto* input_out = static_cast<char*>(slot.inputs.data_ptr());
  auto* target_out = static_cast<char*>(slot.targets.data_ptr());
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = index[i];
    BB_INTERNAL_ASSERT(row >= 0 && row < n, "sample index outside the dataset");
    std::memcpy(input_out + size_t(i) * input_row, inputs + size_t(row) * input_row, input_row);
    std::memcpy(target_out + size_t(i) * target_row, targets + size_t(row) * target_row,
                target_row);
  }
}

Batch BatchAssembler::gather(const std::vector<int64_t>& order, int64_t begin, int64_t count) {
  BB_INTERNAL_ASSERT(count > 0 && count <= slots_[0].inputs.size(0),
                     "micro-batch larger than the buffer");
  BB_INTERNAL_ASSERT(begin >= 0 && begin + count <= int64_t(order.size()),
                     "window outside the epoch");
  drain();
  copy_into(slots_[0], order.data() + begin, count);
  next_slot_ = 1;
  return {slots_[0].inputs.narrow(0, 0, count), slots_[0].targets.narrow(0, 0, count)};
}

void BatchAssembler::prefetch(const std::vector<int64_t>& order, int64_t begin, int64_t count) {
  BB_INTERNAL_ASSERT(count > 0 && count <= slots_[0].inputs.size(0),
                     "micro-batch larger than the buffer");
  BB_INTERNAL_ASSERT(begin >= 0 && begin + count <= int64_t(order.size()),
                     "window outside the epoch");
  const int slot = next_slot_;
  next_slot_ = 1 - next_slot_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    BB_INTERNAL_ASSERT(pending_slot_ < 0, "one prefetch at a time: take() the last one first");
    pending_slot_ = slot;
    pending_count_ = count;
    pending_index_ = order.data() + begin;
    pending_done_ = false;
  }
  if (worker_.joinable()) {
    changed_.notify_all();
    return;
  }
  copy_into(slots_[slot], order.data() + begin, count);  // no worker: gathered here and now
  std::lock_guard<std::mutex> lock(mutex_);
  pending_done_ = true;
}

Batch BatchAssembler::take() {
  std::unique_lock<std::mutex> lock(mutex_);
  BB_INTERNAL_ASSERT(pending_slot_ >= 0, "take() without a prefetch()");
  changed_.wait(lock, [this] { return pending_done_; });
  const Slot& slot = slots_[pending_slot_];
  const int64_t count = pending_count_;
  pending_slot_ = -1;
  if (error_)
    std::rethrow_exception(std::exchange(error_, nullptr));
  return {slot.inputs.narrow(0, 0, count), slot.targets.narrow(0, 0, count)};
}

void BatchAssembler::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (pending_slot_ < 0)
    return;
  changed_.wait(lock, [this] { return pending_done_; });
  pending_slot_ = -1;
  error_ = nullptr;
}

void BatchAssembler::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stop_ || (pending_slot_ >= 0 && !pending_done_); });
    if (stop_)
      return;
    const int slot = pending_slot_;
    const int64_t count = pending_count_;
    const int64_t* index = pending_index_;
    lock.unlock();
    std::exception_ptr error;
    try {
      copy_into(slots_[slot], index, count);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    pending_done_ = true;
    changed_.notify_all();
  }
}

}  // namespace bigbatch
