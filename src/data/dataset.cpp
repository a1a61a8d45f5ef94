#include "data/dataset.h"

#include "core/error.h"
#include "data/idx_reader.h"
#include "report/files.h"

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

BatchAssembler::BatchAssembler(const TensorDataset& dataset, int64_t capacity) : dataset_(dataset) {
  auto input_shape = dataset.inputs.sizes().vec();
  input_shape[0] = capacity;
  input_buffer_ = torch::empty(input_shape, dataset.inputs.options());
  target_buffer_ = torch::empty({capacity}, dataset.targets.options());
}

Batch BatchAssembler::gather(const std::vector<int64_t>& order, int64_t begin, int64_t count) {
  BB_INTERNAL_ASSERT(count > 0 && count <= input_buffer_.size(0),
                     "micro-batch larger than the buffer");
  BB_INTERNAL_ASSERT(begin >= 0 && begin + count <= int64_t(order.size()),
                     "window outside the epoch");
  // A view of the order itself: the index tensor costs no copy.
  const auto index =
      torch::from_blob(const_cast<int64_t*>(order.data() + begin), {count}, torch::kInt64);
  auto inputs = input_buffer_.narrow(0, 0, count);
  auto targets = target_buffer_.narrow(0, 0, count);
  torch::index_select_out(inputs, dataset_.inputs, 0, index);
  torch::index_select_out(targets, dataset_.targets, 0, index);
  return {inputs, targets};
}

}  // namespace bigbatch
