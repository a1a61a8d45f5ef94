#include "data/dataset.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "data/idx_reader.h"
#include "data/npy_format.h"
#include "data/npz_format.h"
#include "data/sampler.h"
#include "data/text_corpus.h"
#include "data/token_rows.h"

namespace bigbatch {

int64_t TensorDataset::items(int64_t begin, int64_t end) const {
  if (!is_tokens() && target_items.empty())
    return end - begin;
  int64_t total = 0;
  for (int64_t row = begin; row < end; ++row)
    total += items_of_row(row);
  return total;
}

double items_per_sample(const TensorDataset& data) {
  if (!data.is_tokens() || data.size() == 0)
    return 0;
  return double(data.items(0, data.size())) / double(data.size());
}

TensorDataset TensorDataset::slice(int64_t begin, int64_t end) const {
  if (is_tokens()) {
    std::vector<int64_t> index(size_t(end - begin));
    std::iota(index.begin(), index.end(), begin);
    return select(index);
  }
  TensorDataset out{
      inputs.slice(0, begin, end), targets.slice(0, begin, end), {}, {}, classes, vocabulary};
  if (!target_items.empty())
    out.target_items.assign(target_items.begin() + begin, target_items.begin() + end);
  return out;
}

TensorDataset TensorDataset::select(const std::vector<int64_t>& index) const {
  if (is_tokens()) {
    TensorDataset out = token_dataset(rows->select(index), vocabulary);
    out.classes = classes;
    return out;
  }
  const auto picked = torch::tensor(index, torch::kInt64);
  TensorDataset out{
      inputs.index_select(0, picked), targets.index_select(0, picked), {}, {}, classes, vocabulary};
  if (!target_items.empty()) {
    for (const int64_t row : index)
      out.target_items.push_back(target_items[size_t(row)]);
  }
  return out;
}

namespace {

// Token rows index[0, count) of `rows` into `inputs` and `targets`, `positions` per row (their
// longest): the rows' layout in a batch.
void fill_token_rows(const TokenRows& rows, const int64_t* index, int64_t count, int64_t positions,
                     int64_t* inputs, int64_t* targets) {
  for (int64_t i = 0; i < count; ++i) {
    BB_INTERNAL_ASSERT(index[i] >= 0 && index[i] < rows.rows(), "sample index outside the dataset");
    rows.fill(index[i], inputs + i * positions, targets + i * positions, positions);
  }
}

}  // namespace

Batch batch_of(const TensorDataset& data, int64_t begin, int64_t end) {
  if (data.is_tokens()) {
    const int64_t longest = std::max<int64_t>(
        1, *std::max_element(data.lengths.begin() + begin, data.lengths.begin() + end));
    Batch batch{torch::empty({end - begin, longest}, torch::kInt64),
                torch::empty({end - begin, longest}, torch::kInt64), data.items(begin, end)};
    std::vector<int64_t> index(size_t(end - begin));
    std::iota(index.begin(), index.end(), begin);
    fill_token_rows(*data.rows, index.data(), end - begin, longest,
                    batch.inputs.data_ptr<int64_t>(), batch.targets.data_ptr<int64_t>());
    return batch;
  }
  // Copies, never views: a module that writes into its inputs in place (x.mul_(0.5)) must
  // change its batch, not the dataset later epochs and evaluations read, as with a DataLoader.
  return {data.inputs.slice(0, begin, end).clone(), data.targets.slice(0, begin, end).clone(),
          data.items(begin, end)};
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
  const int64_t n = images.count();
  auto pixels =
      torch::from_blob(images.data.data(), {n, 1, images.dims[1], images.dims[2]}, torch::kUInt8);
  TensorDataset out;
  out.inputs = pixels.to(torch::kFloat32).div_(255.0);  // normalised once the splits are cut
  out.targets = torch::from_blob(labels.data.data(), {n}, torch::kUInt8).to(torch::kInt64);
  // Labels are bytes: 1 to 256 classes, as many as the largest says (load_idx_dataset takes
  // the largest of both files).
  out.classes = 1 + *std::max_element(labels.data.begin(), labels.data.end());
  return out;
}

// The training images' mean and standard deviation of pixel / 255, summed in double (60,000
// images of 784 pixels lose digits in float).
PixelNormalisation measure_pixels(const torch::Tensor& images) {
  const torch::Tensor x = images.to(torch::kFloat64);
  PixelNormalisation p;
  p.mean = x.mean().item<double>();
  p.std = x.std(/*unbiased=*/false).item<double>();
  return p;
}

// --train-subset keeps the first N training samples; then --val-size holds out the last of them.
void take_subset_and_validation(DatasetSplits& splits, int64_t train_subset, int64_t val_size) {
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
}

// A sample's shape, "[1, 28, 28]".
std::string shape_text(const torch::Tensor& inputs) {
  std::string text = "[";
  for (int64_t d = 1; d < inputs.dim(); ++d)
    text += (d > 1 ? ", " : "") + std::to_string(inputs.size(d));
  return text + "]";
}

torch::Tensor npy_tensor(const NpyArray& array) {
  static_assert(sizeof(float) == 4 && sizeof(double) == 8, "IEEE floats");
  const torch::ScalarType types[] = {torch::kFloat32, torch::kFloat64, torch::kUInt8, torch::kInt32,
                                     torch::kInt64};
  // from_blob does not copy: clone() gives the tensor memory of its own.
  return torch::from_blob(const_cast<char*>(array.data.data()), array.shape,
                          types[static_cast<int>(array.type)])
      .clone();
}

}  // namespace

torch::Tensor npy_inputs(const NpyArray& array, const std::string& path) {
  if (array.shape.size() < 2 || array.shape.size() > 4) {
    throw Error(ErrorKind::Data,
                "'" + path + "' has " + std::to_string(array.shape.size()) +
                    " dimensions; inputs are [N, features], [N, H, W] or [N, C, H, W]",
                "reshape it in numpy before numpy.save (x.reshape(len(x), -1) for features)");
  }
  if (!is_floating(array.type) && array.type != NpyType::U8) {
    throw Error(ErrorKind::Data,
                "'" + path + "' holds " + to_string(array.type) +
                    " inputs; bigbatch reads float32, float64 or uint8 (pixels) inputs",
                "convert them with x.astype('float32')");
  }
  torch::Tensor inputs = npy_tensor(array);
  inputs = array.type == NpyType::U8 ? inputs.to(torch::kFloat32).div_(255.0)
                                     : inputs.to(torch::kFloat32);
  if (inputs.dim() == 3)
    inputs = inputs.unsqueeze(1);  // grayscale images: one channel
  if (!torch::isfinite(inputs).all().item<bool>()) {
    throw Error(ErrorKind::Data, "'" + path + "' holds NaN or infinite values",
                "clean them in numpy, e.g. numpy.nan_to_num(x)");
  }
  return inputs;
}

namespace {

// One split's inputs and labels, checked against each other.
TensorDataset load_npy_split(const NpyArray& x, const std::string& x_path, const NpyArray& y,
                             const std::string& y_path, NpyTargets targets) {
  const bool values =
      targets == NpyTargets::Values || (targets == NpyTargets::Auto && is_floating(y.type));
  if (values ? (y.shape.empty() || y.shape.size() > 2 || (y.shape.size() == 2 && y.shape[1] == 0))
             : y.shape.size() != 1) {
    throw Error(ErrorKind::Data,
                "'" + y_path + "' holds " + to_string(y.type) + " of " +
                    std::to_string(y.shape.size()) + " dimensions; " +
                    (values ? "regression targets are one value [N] or one row [N, K] per sample"
                            : "labels are one integer class per sample, [N]"),
                values ? "save y with shape [N] or [N, K]"
                       : "save the class indices, e.g. y.argmax(1) of one-hot rows");
  }
  if (!values && is_floating(y.type)) {
    throw Error(ErrorKind::Data,
                "'" + y_path + "' holds " + to_string(y.type) +
                    " values, and --task classify needs integer class labels",
                "save y.astype('int64') for classes, or use --task regress for values");
  }
  if (x.count() != y.count()) {
    throw Error(ErrorKind::Data,
                "'" + x_path + "' holds " + std::to_string(x.count()) + " samples but '" + y_path +
                    "' holds " + std::to_string(y.count()) + " " + (values ? "targets" : "labels"),
                "save inputs and targets of the same samples, in the same order");
  }
  if (x.count() == 0 || x.elements() == 0)
    throw Error(ErrorKind::Data, "'" + x_path + "' holds no samples", "use a non-empty array");
  TensorDataset out;
  out.inputs = npy_inputs(x, x_path);
  if (values) {
    // The model computes in float32; so do its targets.
    out.targets = npy_tensor(y).to(torch::kFloat32);
    if (!torch::isfinite(out.targets).all().item<bool>()) {
      throw Error(ErrorKind::Data, "'" + y_path + "' holds NaN or infinite targets",
                  "remove or impute those samples");
    }
    return out;
  }
  out.targets = npy_tensor(y).to(torch::kInt64);
  const int64_t smallest = out.targets.min().item<int64_t>();
  if (smallest < 0) {
    throw Error(
        ErrorKind::Data,
        "'" + y_path + "' has label " + std::to_string(smallest) + "; classes are numbered from 0",
        "map the labels to 0 .. classes - 1");
  }
  return out;
}

// The class count of labelled splits, set in each: the largest label of any split + 1, and at
// least two.
int64_t count_classes(DatasetSplits& splits) {
  int64_t classes = 0;
  for (TensorDataset* split : {&splits.train, &splits.validation, &splits.test}) {
    if (split->size() == 0)
      continue;
    classes = std::max(classes, split->targets.max().item<int64_t>() + 1);
  }
  classes = std::max<int64_t>(classes, 2);
  for (TensorDataset* split : {&splits.train, &splits.validation, &splits.test})
    split->classes = classes;
  return classes;
}

// Every split's samples have the training samples' shape: a model is built for that one.
void check_split_shapes(const DatasetSplits& splits, const std::string& directory,
                        const std::string& hint) {
  const std::pair<const char*, const TensorDataset*> named[] = {{"validation", &splits.validation},
                                                                {"test", &splits.test}};
  for (const auto& [name, split] : named) {
    if (split->size() == 0 ||
        split->inputs.sizes().slice(1) == splits.train.inputs.sizes().slice(1))
      continue;
    throw Error(ErrorKind::Data,
                std::string("the ") + name + " samples in '" + directory + "' have shape " +
                    shape_text(split->inputs) + ", the training samples " +
                    shape_text(splits.train.inputs),
                hint);
  }
}

}  // namespace

namespace {

void check_data(bool ok, const std::string& problem, const std::string& hint) {
  if (!ok)
    throw Error(ErrorKind::Data, problem, hint);
}

// One split of a program's samples, checked on its own.
TensorDataset given_split(const GivenSplit& given, const std::string& split) {
  check_data(given.inputs.defined() && given.targets.defined(),
             "the " + split + " samples have no " + (given.inputs.defined() ? "targets" : "inputs"),
             "give (inputs, targets)");
  const torch::Tensor& x = given.inputs;
  const torch::Tensor& y = given.targets;
  check_data(x.dim() >= 1 && y.dim() >= 1,
             "the " + split + " inputs or targets are a single value, not one row per sample",
             "give arrays whose first dimension is the samples");
  check_data(x.size(0) == y.size(0),
             "the " + split + " inputs hold " + std::to_string(x.size(0)) +
                 " samples, the targets " + std::to_string(y.size(0)),
             "give inputs and targets of the same samples, in the same order");
  check_data(x.size(0) > 0 && x.numel() > 0, "the " + split + " inputs hold no samples",
             "give at least one sample");
  const bool float_inputs = x.is_floating_point();
  check_data(float_inputs || (c10::isIntegralType(x.scalar_type(), /*includeBool=*/false)),
             "the " + split + " inputs are " + std::string(c10::toString(x.scalar_type())) +
                 "; bigbatch reads floating-point inputs, or integer ones (token ids)",
             "convert them, e.g. x.float()");
  TensorDataset out;
  out.inputs = (float_inputs ? x : x.to(torch::kInt64)).contiguous();
  check_data(!float_inputs || torch::isfinite(out.inputs).all().item<bool>(),
             "the " + split + " inputs hold NaN or infinite values",
             "clean them first, e.g. torch.nan_to_num(x)");
  if (y.is_floating_point()) {
    check_data(y.dim() <= 2,
               "the " + split + " targets are " + c10::str(y.sizes()) +
                   "; regression targets are one value [N] or one row [N, K] per sample",
               "give targets of shape [N] or [N, K]");
    out.targets = y.contiguous();
    check_data(torch::isfinite(out.targets).all().item<bool>(),
               "the " + split + " targets hold NaN or infinite values",
               "remove or impute those samples");
    return out;
  }
  check_data(c10::isIntegralType(y.scalar_type(), /*includeBool=*/false) && y.dim() <= 2,
             "the " + split + " targets are " + c10::str(y.sizes()) + " " +
                 std::string(c10::toString(y.scalar_type())) +
                 "; class labels are one integer per sample [N] or per position [N, T], "
                 "regression targets floats",
             "give the class indices, e.g. y.argmax(1) of one-hot rows, or y.float() to regress");
  out.targets = y.to(torch::kInt64).contiguous();
  // Labels per position: padding is kIgnoreTarget (PyTorch's ignore_index), counted nowhere.
  const bool positions = out.targets.dim() == 2;
  const torch::Tensor counted = positions ? out.targets.ne(kIgnoreTarget) : torch::Tensor();
  const torch::Tensor labels =
      positions ? out.targets.masked_select(counted) : out.targets.reshape({-1});
  const int64_t smallest = labels.numel() > 0 ? labels.min().item<int64_t>() : 0;
  check_data(smallest >= 0,
             "the " + split + " targets have label " + std::to_string(smallest) +
                 "; classes are numbered from 0" +
                 (positions ? " (" + std::to_string(kIgnoreTarget) + " marks padding)" : ""),
             "map the labels to 0 .. classes - 1");
  if (positions) {
    const torch::Tensor per_row = counted.sum(1).contiguous();
    const int64_t* begin = per_row.data_ptr<int64_t>();
    out.target_items.assign(begin, begin + per_row.numel());
  }
  return out;
}

}  // namespace

DatasetSplits given_splits(const GivenSplit& train, const GivenSplit& validation,
                           const GivenSplit& test) {
  DatasetSplits splits;
  splits.train = given_split(train, "training");
  const std::pair<const char*, const GivenSplit*> held_out[] = {{"validation", &validation},
                                                                {"test", &test}};
  for (const auto& [name, given] : held_out) {
    if (!given->inputs.defined() && !given->targets.defined())
      continue;
    TensorDataset split = given_split(*given, name);
    check_data(split.inputs.sizes().slice(1) == splits.train.inputs.sizes().slice(1),
               std::string("the ") + name + " samples have shape " + shape_text(split.inputs) +
                   ", the training samples " + shape_text(splits.train.inputs),
               "give every split samples of the same shape");
    check_data(split.is_regression() == splits.train.is_regression() &&
                   split.targets.sizes().slice(1) == splits.train.targets.sizes().slice(1),
               std::string("the ") + name + " targets are " + c10::str(split.targets.sizes()) +
                   " " + c10::toString(split.targets.scalar_type()) + ", the training targets " +
                   c10::str(splits.train.targets.sizes()) + " " +
                   c10::toString(splits.train.targets.scalar_type()),
               "give every split targets of the same kind and width");
    (std::string(name) == "validation" ? splits.validation : splits.test) = std::move(split);
  }
  if (splits.train.is_regression()) {
    splits.description = std::to_string(splits.train.size()) + " samples of shape " +
                         shape_text(splits.train.inputs) + " with " +
                         std::to_string(splits.train.outputs()) + " regression target(s)";
  } else {
    const int64_t classes = count_classes(splits);
    splits.description = std::to_string(splits.train.size()) + " samples of shape " +
                         shape_text(splits.train.inputs) + " in " + std::to_string(classes) +
                         " classes";
  }
  return splits;
}

std::map<std::string, std::string> sample_layout(const TensorDataset& data) {
  if (data.is_tokens() || !data.inputs.defined() || !data.targets.defined())
    return {};
  std::vector<std::string> dims;
  for (const int64_t size : data.inputs.sizes().slice(1))
    dims.push_back(std::to_string(size));
  const std::string targets = !data.is_regression() ? "classes " + std::to_string(data.classes)
                              : data.targets.dim() == 1
                                  ? std::string("values")
                                  : "values " + std::to_string(data.targets.size(1));
  return {{"sample_shape", join(dims, ",")}, {"targets", targets}};
}

std::optional<TensorDataset> blank_samples(const std::map<std::string, std::string>& metadata) {
  const auto shape = metadata.find("sample_shape"), targets = metadata.find("targets");
  if (shape == metadata.end() || targets == metadata.end())
    return std::nullopt;
  const int64_t rows = 2;
  std::vector<int64_t> sizes{rows};
  for (const std::string& dim : split(shape->second, ',')) {
    const auto size = parse_int(dim);
    if (!size || *size <= 0 || *size > (int64_t(1) << 24) || sizes.size() > 4)
      return std::nullopt;
    sizes.push_back(*size);
  }
  if (sizes.size() != 2 && sizes.size() != 4)  // rows of features, or images [N, C, H, W]
    return std::nullopt;
  TensorDataset blank;
  blank.inputs = torch::zeros(sizes, torch::kFloat32);
  const std::vector<std::string> words = split(targets->second, ' ');
  // "classes K" and "values K" need a positive K (0: none given, unreadable or past any model).
  int64_t count = words.size() == 2 ? parse_int(words[1]).value_or(0) : 0;
  if (count > (int64_t(1) << 24))
    count = 0;
  if (words.size() == 2 && words[0] == "classes" && count > 0) {
    blank.targets = torch::zeros({rows}, torch::kInt64);
    blank.classes = count;
  } else if (words.size() == 1 && words[0] == "values") {
    blank.targets = torch::zeros({rows}, torch::kFloat32);
  } else if (words.size() == 2 && words[0] == "values" && count > 0) {
    blank.targets = torch::zeros({rows, count}, torch::kFloat32);
  } else {
    return std::nullopt;
  }
  return blank;
}

bool TensorDataset::targets_look_like_classes() const {
  if (!is_regression() || targets.dim() != 1 || targets.numel() == 0)
    return false;
  const torch::Tensor t = targets.to(torch::kFloat64);
  const double least = t.min().item<double>(), most = t.max().item<double>();
  return least >= 0 && most <= 1000 && torch::equal(t, t.round());
}

DatasetSplits load_npy_dataset(const std::string& directory, int64_t train_subset, int64_t val_size,
                               NpyTargets targets) {
  // A directory of NAME.npy files, or one .npz archive of the same names.
  const bool archive =
      directory.size() > 4 && directory.compare(directory.size() - 4, 4, ".npz") == 0;
  if (!archive && !path_exists(directory)) {
    throw Error(ErrorKind::Data, "npy directory '" + directory + "' does not exist",
                "give the directory holding x_train.npy and y_train.npy, e.g. --dataset npy:data");
  }
  const NpzArchive members = archive ? read_npz_file(directory) : NpzArchive{};
  const auto where = [&](const std::string& stem) {
    return archive ? directory + ":" + stem + ".npy" : directory + "/" + stem + ".npy";
  };
  const auto has = [&](const std::string& stem) {
    return archive ? members.find(stem) != nullptr : path_exists(where(stem));
  };
  const auto array = [&](const std::string& stem) {
    return archive ? *members.find(stem) : read_npy_file(where(stem));
  };
  const auto split_of = [&](const std::string& split) {
    return load_npy_split(array("x_" + split), where("x_" + split), array("y_" + split),
                          where("y_" + split), targets);
  };
  const auto optional_split = [&](const std::string& split) {
    const bool x = has("x_" + split), y = has("y_" + split);
    if (x != y) {
      throw Error(ErrorKind::Data,
                  "'" + directory + "' has " + (x ? "x_" : "y_") + split + ".npy but not " +
                      (x ? "y_" : "x_") + split + ".npy",
                  "save both, or neither");
    }
    return x ? split_of(split) : TensorDataset{};
  };
  if (!has("x_train") || !has("y_train")) {
    throw Error(ErrorKind::Data, "'" + directory + "' has no x_train.npy and y_train.npy",
                archive ? "save them with numpy.savez(PATH, x_train=x, y_train=y)"
                        : "save them with numpy.save(DIR + '/x_train.npy', x) and numpy.save(DIR "
                          "+ '/y_train.npy', y)");
  }
  // One kind of targets for every split, the training split's: a float y_train with integer
  // y_test would otherwise make the test split a classifier's.
  if (targets == NpyTargets::Auto)
    targets = is_floating(array("y_train").type) ? NpyTargets::Values : NpyTargets::Classes;
  DatasetSplits splits;
  splits.train = split_of("train");
  splits.test = optional_split("test");
  TensorDataset validation = optional_split("val");
  if (validation.size() > 0 && val_size > 0) {
    throw Error(ErrorKind::Config,
                "'" + directory + "' has x_val.npy, the validation split, and --val-size " +
                    std::to_string(val_size) + " would hold out another",
                "drop --val-size");
  }
  take_subset_and_validation(splits, train_subset, val_size);
  if (validation.size() > 0)
    splits.validation = validation;
  check_split_shapes(splits, directory,
                     "save x_train, x_val and x_test with the same shape per sample");
  if (splits.train.is_regression()) {
    for (const TensorDataset* split : {&splits.validation, &splits.test}) {
      if (split->size() > 0 &&
          split->targets.sizes().slice(1) != splits.train.targets.sizes().slice(1))
        throw Error(ErrorKind::Data,
                    "the splits in '" + directory + "' have targets of different widths",
                    "save y_train, y_val and y_test with the same shape per sample");
    }
    splits.description = std::to_string(splits.train.size()) + " samples of shape " +
                         shape_text(splits.train.inputs) + " with " +
                         std::to_string(splits.train.outputs()) + " regression target(s) from " +
                         directory;
    if (splits.train.targets_look_like_classes()) {
      splits.description +=
          " (floats that are whole numbers from 0: if they are class labels, save y_train as "
          "integers, y.astype('int64'), to classify)";
    }
    return splits;
  }
  const int64_t classes = count_classes(splits);
  splits.description = std::to_string(splits.train.size()) + " samples of shape " +
                       shape_text(splits.train.inputs) + " in " + std::to_string(classes) +
                       " classes from " + directory;
  return splits;
}

DatasetSplits load_idx_dataset(const std::string& directory, int64_t train_subset, int64_t val_size,
                               PixelNormalisation pixels) {
  DatasetSplits splits;
  splits.train = load_split(directory, "train");
  splits.test = load_split(directory, "t10k");
  check_split_shapes(splits, directory,
                     "the t10k and train images must have the same height and width");
  // As for npy arrays: the largest label of any split + 1, and at least two.
  const int64_t classes = std::max<int64_t>({splits.train.classes, splits.test.classes, 2});
  splits.train.classes = splits.test.classes = classes;
  take_subset_and_validation(splits, train_subset, val_size);
  const bool measured = !pixels.known();
  if (measured) {
    pixels = measure_pixels(splits.train.inputs);
    if (!(pixels.std > 0)) {
      throw Error(ErrorKind::Data,
                  "the training images of '" + directory + "' are all one shade (pixel / 255 = " +
                      format_significant(pixels.mean) + "): nothing to normalise or learn from",
                  "check the images file, or give --pixel-mean and --pixel-std");
    }
  }
  for (TensorDataset* split : {&splits.train, &splits.validation, &splits.test}) {
    if (split->inputs.defined())
      split->inputs.sub_(pixels.mean).div_(pixels.std);
  }
  splits.pixels = pixels;
  splits.description = std::to_string(splits.train.size()) + " samples of shape " +
                       shape_text(splits.train.inputs) + " in " + std::to_string(classes) +
                       " classes, normalised " + pixels.describe() +
                       (measured ? " (measured on the training images)" : " (as given)");
  return splits;
}

std::string PixelNormalisation::describe() const {
  return "(pixel / 255 - " + format_significant(mean) + ") / " + format_significant(std);
}

TensorDataset token_dataset(TokenRows rows, int64_t vocabulary) {
  TensorDataset data;
  data.lengths = rows.lengths;
  data.bytes = rows.bytes;
  data.vocabulary = vocabulary;
  data.rows = std::make_shared<const TokenRows>(std::move(rows));
  return data;
}

namespace {

// Token rows as splits: `val_size` of them held out by `seed` (0: 2%, at least 1, at most
// 1000). `name` names the data in errors ("text corpus 'fortunes'").
DatasetSplits split_token_rows(const TokenRows& rows, int64_t vocabulary, const std::string& name,
                               bool packed, int64_t seq_len, int64_t train_subset, int64_t val_size,
                               uint64_t seed) {
  const int64_t n = rows.rows();
  if (n < 2) {
    throw Error(
        ErrorKind::Data,
        name + " makes " + std::to_string(n) + " sample(s) of " + std::to_string(seq_len + 1) +
            " tokens: too few to train and validate",
        packed ? "use more data, a smaller --seq-len, or --sequences documents" : "use more data");
  }
  const TensorDataset all = token_dataset(rows, vocabulary);  // a table: copying it is cheap
  // Held out by the seed (an order no epoch uses), so every run with the seed holds out the
  // same samples; the rest keep corpus order.
  const int64_t held_out =
      val_size > 0 ? val_size : std::clamp<int64_t>(n / 50, int64_t{1}, int64_t{1000});
  if (held_out >= n) {
    throw Error(ErrorKind::Config,
                "--val-size " + std::to_string(held_out) + " leaves no training samples (" +
                    std::to_string(n) + " available)",
                "use a --val-size below " + std::to_string(n));
  }
  constexpr int64_t kHoldOutEpoch = -1;
  const auto shuffled = epoch_order(seed, kHoldOutEpoch, n, Shuffle::On);
  std::vector<int64_t> validation(shuffled.begin(), shuffled.begin() + held_out);
  std::vector<int64_t> train(shuffled.begin() + held_out, shuffled.end());
  std::sort(validation.begin(), validation.end());
  std::sort(train.begin(), train.end());
  if (train_subset > 0) {
    if (train_subset > int64_t(train.size())) {
      throw Error(ErrorKind::Config,
                  "--train-subset " + std::to_string(train_subset) +
                      " is larger than the training set (" + std::to_string(train.size()) +
                      " samples)",
                  "use --train-subset " + std::to_string(train.size()) + " or less, or 0 for all");
    }
    train.resize(size_t(train_subset));
  }
  DatasetSplits splits;
  splits.train = all.select(train);
  splits.validation = all.select(validation);
  splits.description =
      packed ? std::to_string(n) + " packed blocks of " + std::to_string(seq_len + 1) + " tokens"
             : std::to_string(n) + " document samples, " + std::to_string(rows.cut_documents) +
                   " cut at " + std::to_string(seq_len + 1) + " tokens";
  return splits;
}

// Documents cut at a row's length lose the rest: said when that is most of the data (a directory
// of files without separator lines is one document per file).
void warn_when_most_tokens_are_cut(DatasetSplits& splits, const TokenRows& rows, int64_t seq_len,
                                   const std::string& remedies) {
  const int64_t total = rows.source ? rows.source->size() : 0;
  if (rows.cut_tokens * 2 <= total)
    return;
  splits.warnings.push_back(
      std::to_string(rows.cut_tokens) + " of the data's " + std::to_string(total) + " tokens (" +
      format_fixed(100.0 * double(rows.cut_tokens) / double(total), 0) + "%) lie past --seq-len " +
      std::to_string(seq_len) + " in the " + std::to_string(rows.cut_documents) +
      " document(s) longer than a sample, and are never trained on; " + remedies);
}

}  // namespace

DatasetSplits load_text_dataset(const TextCorpus& corpus, const std::string& name, bool packed,
                                int64_t seq_len, int64_t train_subset, int64_t val_size,
                                uint64_t seed, const TextTokenizer& tokenizer) {
  const TokenDocuments documents = tokenize_documents(corpus.documents, tokenizer, packed, name);
  // Padding is end-of-text: its targets are ignored, and causal attention keeps it from the
  // positions before it.
  const int32_t pad = tokenizer.end_of_text();
  const TokenRows rows =
      packed ? packed_rows(documents, seq_len, pad) : document_rows(documents, seq_len, pad);
  DatasetSplits splits =
      split_token_rows(rows, tokenizer.vocabulary(), "text corpus '" + name + "'", packed, seq_len,
                       train_subset, val_size, seed);
  warn_when_most_tokens_are_cut(
      splits, rows, seq_len,
      "cut the text into documents (--doc-separator LINE, blank or line), or join them "
      "(--sequences packed)");
  splits.description =
      std::to_string(corpus.documents.size()) + " documents (" + std::to_string(corpus.bytes) +
      " bytes) from " + std::to_string(corpus.files) + " file(s)" +
      (corpus.skipped_files > 0
           ? ", " + std::to_string(corpus.skipped_files) + " binary or repeated skipped"
           : std::string()) +
      "; " + splits.description + "; " + tokenizer.describe();
  return splits;
}

DatasetSplits load_token_file_dataset(const TokenFiles& files, const std::string& name, bool packed,
                                      int64_t seq_len, int64_t vocab_size, int64_t train_subset,
                                      int64_t val_size, uint64_t seed) {
  if (!packed && !files.has_documents) {
    throw Error(ErrorKind::Config,
                "token data '" + name + "' (" + files.format +
                    ") is one stream of tokens with no document boundaries, so --sequences "
                    "documents has no documents to take",
                "give --eot-id ID, the id that ends each document (GPT-2's is 50256), use "
                "--sequences packed (or auto), or a Megatron .bin/.idx pair, which records its "
                "documents");
  }
  const int64_t needed = files.largest_token + 1;
  if (vocab_size > 0 && vocab_size < needed) {
    throw Error(ErrorKind::Data,
                "token data '" + name + "' holds token id " + std::to_string(files.largest_token) +
                    ", beyond --vocab-size " + std::to_string(vocab_size),
                "give --vocab-size " + std::to_string(needed) +
                    " or more (the tokenizer's vocabulary), or leave it out to take the largest "
                    "id + 1");
  }
  const int64_t vocabulary = vocab_size > 0 ? vocab_size : needed;
  // Padding is an id every vocabulary has; its targets are ignored and causal attention keeps
  // it from the positions before it.
  constexpr int32_t kPad = 0;
  // The rows read the files where they lie (memory-mapped), for as long as any split lives.
  const auto documents = std::make_shared<const TokenDocuments>(files.documents);
  const TokenRows rows =
      packed ? packed_rows(documents, seq_len, kPad) : document_rows(documents, seq_len, kPad);
  DatasetSplits splits = split_token_rows(rows, vocabulary, "token data '" + name + "'", packed,
                                          seq_len, train_subset, val_size, seed);
  splits.description =
      std::to_string(files.documents.size()) + " tokens in " + std::to_string(files.files) +
      " file(s), " + files.format +
      (files.has_documents
           ? ", " + std::to_string(files.documents.documents()) + " documents" +
                 (files.eot_id >= 0 ? " (each ended by id " + std::to_string(files.eot_id) + ")"
                                    : std::string())
           : std::string()) +
      "; " + splits.description +
      (rows.short_documents > 0
           ? ", " + std::to_string(rows.short_documents) + " of under 2 tokens skipped"
           : std::string()) +
      "; vocabulary " + std::to_string(vocabulary) +
      (vocab_size > 0 ? std::string() : " (the largest id + 1)");
  warn_when_most_tokens_are_cut(
      splits, rows, seq_len, "join the documents (--sequences packed), or give a larger --seq-len");
  return splits;
}

BatchAssembler::BatchAssembler(const TensorDataset& dataset, int64_t capacity, bool background,
                               bool pinned)
    : dataset_(dataset), capacity_(capacity) {
  if (dataset.is_tokens()) {
    // Filled row by row at the micro-batch's longest: [capacity x width] holds any of them.
    const auto options = torch::TensorOptions(torch::kInt64).pinned_memory(pinned);
    for (Slot& slot : slots_) {
      slot.inputs = torch::empty({capacity * dataset.width()}, options);
      slot.targets = torch::empty({capacity * dataset.width()}, options);
    }
    if (background)
      worker_ = std::thread([this] { work(); });
    return;
  }
  std::vector<int64_t> input_shape = {capacity};
  for (int64_t d = 1; d < dataset.inputs.dim(); ++d)
    input_shape.push_back(dataset.inputs.size(d));
  std::vector<int64_t> target_shape = {capacity};
  for (int64_t d = 1; d < dataset.targets.dim(); ++d)
    target_shape.push_back(dataset.targets.size(d));
  for (Slot& slot : slots_) {
    slot.inputs = torch::empty(input_shape, dataset.inputs.options().pinned_memory(pinned));
    slot.targets = torch::empty(target_shape, dataset.targets.options().pinned_memory(pinned));
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
  if (dataset_.is_tokens()) {
    slot.items = 0;
    slot.longest = 1;
    for (int64_t i = 0; i < count; ++i) {
      BB_INTERNAL_ASSERT(index[i] >= 0 && index[i] < dataset_.size(),
                         "sample index outside the dataset");
      const int64_t length = dataset_.lengths[size_t(index[i])];
      slot.items += length;
      slot.longest = std::max(slot.longest, length);
    }
    // Rows laid out at the batch's longest, so the batch is a contiguous [count, longest].
    fill_token_rows(*dataset_.rows, index, count, slot.longest, slot.inputs.data_ptr<int64_t>(),
                    slot.targets.data_ptr<int64_t>());
    return;
  }
  const int64_t n = dataset_.inputs.size(0);
  const size_t input_row =
      size_t(dataset_.inputs.numel() / std::max<int64_t>(1, n)) * dataset_.inputs.element_size();
  const size_t target_row =
      size_t(dataset_.targets.numel() / std::max<int64_t>(1, n)) * dataset_.targets.element_size();
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
  slot.items = count;
  if (!dataset_.target_items.empty()) {
    slot.items = 0;
    for (int64_t i = 0; i < count; ++i)
      slot.items += dataset_.target_items[size_t(index[i])];
  }
}

Batch BatchAssembler::batch_in(const Slot& slot, int64_t count) const {
  if (dataset_.is_tokens()) {
    const int64_t n = count * slot.longest;
    return {slot.inputs.narrow(0, 0, n).view({count, slot.longest}),
            slot.targets.narrow(0, 0, n).view({count, slot.longest}), slot.items};
  }
  return {slot.inputs.narrow(0, 0, count), slot.targets.narrow(0, 0, count), slot.items};
}

Batch BatchAssembler::gather(const std::vector<int64_t>& order, int64_t begin, int64_t count) {
  BB_INTERNAL_ASSERT(count > 0 && count <= capacity_, "micro-batch larger than the buffer");
  BB_INTERNAL_ASSERT(begin >= 0 && begin + count <= int64_t(order.size()),
                     "window outside the epoch");
  drain();
  copy_into(slots_[0], order.data() + begin, count);
  next_slot_ = 1;
  return batch_in(slots_[0], count);
}

void BatchAssembler::prefetch(const std::vector<int64_t>& order, int64_t begin, int64_t count) {
  BB_INTERNAL_ASSERT(count > 0 && count <= capacity_, "micro-batch larger than the buffer");
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
  return batch_in(slot, count);
}

int64_t BatchAssembler::items(const std::vector<int64_t>& order, int64_t begin,
                              int64_t count) const {
  if (!dataset_.is_tokens() && dataset_.target_items.empty())
    return count;
  int64_t total = 0;
  for (int64_t i = begin; i < begin + count; ++i)
    total += dataset_.items_of_row(order[size_t(i)]);
  return total;
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
