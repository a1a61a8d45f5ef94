#pragma once
// In-memory datasets as tensors — labelled images, or token rows of a text corpus — and the
// assembly of micro-batches from positions in the epoch order into preallocated buffers (no
// allocation per micro-step).
//
//   DatasetSplits data = load_idx_dataset(dir, /*train_subset=*/0, /*val_size=*/5000);
//   data.pixels.describe();                 // "(pixel / 255 - 0.286041) / 0.353024"
//   BatchAssembler assembler(data.train, /*capacity=*/32);
//   Batch batch = assembler.gather(order, /*begin=*/0, /*count=*/32);
#include <torch/torch.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <cstdint>
#include <string>
#include <vector>

#include "data/text_corpus.h"
#include "data/token_files.h"

namespace bigbatch {

// IDX images enter the model as (pixel / 255 - mean) / std. {0, 0}: not measured (yet).
struct PixelNormalisation {
  double mean = 0;
  double std = 0;
  bool known() const { return std > 0; }
  // "(pixel / 255 - 0.286041) / 0.353024"
  std::string describe() const;
};

struct TensorDataset {
  torch::Tensor inputs;   // [N, 1, H, W] float32 images, normalised; or [N, F] features
                          // (undefined for token rows: see `rows`)
  torch::Tensor targets;  // [N] int64 class labels; or float32 regression targets [N] or
                          // [N, K] (undefined for token rows)
  // Token rows only (empty for images, whose items are their samples): target tokens per row
  // (the row's items) and the text bytes among them (for bits per byte).
  std::vector<int64_t> lengths{};
  std::vector<int64_t> bytes{};
  // Labelled samples: the number of classes (every split of a dataset says the same); 0 for
  // token rows.
  int64_t classes = 0;
  // Token rows: the vocabulary a model must predict over (the tokenizer's, or the token
  // files' largest id + 1); 0 for samples.
  int64_t vocabulary = 0;
  // Token rows: the table of rows over their documents (data/token_rows.h), read into each
  // batch as [rows, positions] int64 inputs and next-token targets (the shift), kIgnoreTarget
  // past a row's length. Nothing is materialised beside it.
  std::shared_ptr<const TokenRows> rows{};
  // Samples whose targets are a sequence of class labels each ([N, T] int64, kIgnoreTarget
  // where a position counts nowhere: a program's padded documents): each sample's labelled
  // positions, its items. Empty otherwise (one item per sample, or token rows' `lengths`).
  std::vector<int64_t> target_items{};

  int64_t size() const { return rows ? rows->rows() : inputs.defined() ? inputs.size(0) : 0; }
  bool is_tokens() const { return rows != nullptr; }
  // Token rows: the positions of a row (--seq-len).
  int64_t width() const { return rows ? rows->width : 0; }
  // Regression: float targets, [N] (one value per sample) or [N, K].
  bool is_regression() const { return targets.defined() && targets.is_floating_point(); }
  // The width of a model's output for this data: its classes, or its regression targets.
  // Regression targets that read like class labels: one column of whole numbers from 0, few
  // distinct (float labels, as pandas saves them, train as regression).
  bool targets_look_like_classes() const;
  int64_t outputs() const {
    return is_regression() ? (targets.dim() == 1 ? 1 : targets.size(1)) : classes;
  }
  // Items of rows [begin, end): what the mean is taken over.
  int64_t items(int64_t begin, int64_t end) const;
  // Items of one row.
  int64_t items_of_row(int64_t row) const {
    return rows ? lengths[size_t(row)] : target_items.empty() ? 1 : target_items[size_t(row)];
  }
  TensorDataset slice(int64_t begin, int64_t end) const;
  TensorDataset select(const std::vector<int64_t>& rows) const;
};

// Token rows: their mean target tokens per row (what intervals in tokens convert by); 0 for
// samples, which are their own items.
double items_per_sample(const TensorDataset& data);

// What a model built for samples (not token rows) needs to know of them, as a weights file's
// metadata records it: "sample_shape" ("1,28,28": one sample's dimensions) and "targets"
// ("classes 10", "values" for [N], "values 3" for [N, 3]). Empty for token rows.
std::map<std::string, std::string> sample_layout(const TensorDataset& data);
// Two blank samples (zeros, class 0) laid out as `metadata` says: what builds and checks a model
// without reading its training data. nullopt when the metadata has no layout (older weights) or
// one that cannot be read.
std::optional<TensorDataset> blank_samples(const std::map<std::string, std::string>& metadata);

struct DatasetSplits {
  TensorDataset train;
  TensorDataset validation;  // empty unless val_size > 0
  TensorDataset test;        // empty for text corpora: validation is their held-out split
  // Training samples set aside for the run's own decisions (--growth-holdout: the automatic
  // batch's branch tests score on them): never trained on, never reported.
  TensorDataset controller;
  std::string description;            // what was read, for the start of a run (text corpora)
  PixelNormalisation pixels;          // IDX images: the normalisation every split went through
  std::vector<std::string> warnings;  // what a run says about the data before it trains
};

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `directory`. train_subset > 0
// keeps the first N training samples; val_size > 0 then holds out the last val_size of them.
// The classes are the labels' largest + 1 (of both files); the images are normalised by
// `pixels`, or, when it is not known, by the mean and standard deviation measured on the
// training samples (after the subset and the hold-out: nothing of validation or test).
DatasetSplits load_idx_dataset(const std::string& directory, int64_t train_subset, int64_t val_size,
                               PixelNormalisation pixels = {});

// Reads x_train.npy and y_train.npy from `directory` (numpy.save's format, data/npy_format.h),
// and x_test/y_test, x_val/y_val where present. Inputs: float32 or float64 arrays as they are
// (float64 becomes float32), uint8 as pixels scaled to [0, 1]; [N, H, W] becomes images
// [N, 1, H, W], [N, F] stays rows of features. Labels: integers 0 to classes - 1, the class
// count being the largest label of any split + 1; or, for regression, values [N] or [N, K]
// (float32). train_subset and val_size as for IDX; a
// validation file and --val-size together are an error.
struct NpyArray;
// An .npy array of inputs as load_npy_dataset prepares them (`path` names it in errors).
torch::Tensor npy_inputs(const NpyArray& array, const std::string& path);

// What y_*.npy holds: class labels, values to regress on, or whichever its dtype says
// (floating point: values).
enum class NpyTargets { Auto, Classes, Values };
DatasetSplits load_npy_dataset(const std::string& directory, int64_t train_subset, int64_t val_size,
                               NpyTargets targets = NpyTargets::Auto);

// Samples a program gives as tensors (bigbatch.train's arrays, the Python package): per split
// inputs [N, ...] (floating point as given, in the module's dtype; integers as int64: token ids
// or categories the module embeds) and targets [N] integer class labels or floating-point
// values [N] or [N, K]. Every split has the training samples' shape and kind of target; the
// class count is the largest label of any split + 1, at least two. Error (Data) naming the
// split and what is wrong. An empty validation or test split is none.
struct GivenSplit {
  torch::Tensor inputs;
  torch::Tensor targets;
};
DatasetSplits given_splits(const GivenSplit& train, const GivenSplit& validation,
                           const GivenSplit& test);

// A micro-batch. Token rows are cut to the batch's longest row (padding costs only up to it):
// inputs and targets [rows, longest] int64.
struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
  int64_t items = 0;  // what the mean is over: samples, or the target tokens that are not padding
  int64_t size() const { return targets.size(0); }
};

// Rows [begin, end) of `data` as a batch of its own memory (evaluation, probes).
Batch batch_of(const TensorDataset& data, int64_t begin, int64_t end);

// Token rows (data/token_rows.h) as a dataset over `vocabulary` ids (the byte tokenizer's by
// default); the rows share their documents, nothing is copied.
TensorDataset token_dataset(TokenRows rows, int64_t vocabulary = kByteVocabulary);

// A text corpus (data/text_corpus.h: text:PATH, jsonl:FILE) through `tokenizer` as token rows:
// documents or packed blocks of `seq_len`, and `val_size` of them held out for validation, chosen
// by `seed` (0: 2%, at least 1, at most 1000); `description` says what was read. `name` names the
// corpus in errors.
DatasetSplits load_text_dataset(const TextCorpus& corpus, const std::string& name, bool packed,
                                int64_t seq_len, int64_t train_subset, int64_t val_size,
                                uint64_t seed, const TextTokenizer& tokenizer = byte_tokenizer());

// Token files (data/token_files.h: tokens:PATH) as token rows, split as load_text_dataset
// does. `packed` false needs files that record documents (Megatron); vocab_size 0 takes the
// largest id + 1, else every id must be below it. Rows are padded with id 0.
DatasetSplits load_token_file_dataset(const TokenFiles& files, const std::string& name, bool packed,
                                      int64_t seq_len, int64_t vocab_size, int64_t train_subset,
                                      int64_t val_size, uint64_t seed);

// Gathers the samples at order[begin, begin + count) into buffers allocated once (no
// allocation per micro-batch). Two ways:
//  - gather(): now, on the calling thread; a view valid until the next gather() or prefetch().
//  - prefetch(), then take(): two buffers alternate, so the next micro-batch is gathered while
//    the current one trains — with `background`, by a worker thread (batch assembly overlapped
//    with compute). One prefetch may be outstanding; a taken batch stays valid until the
//    prefetch after the next take(), i.e. through its micro-step.
//
//   BatchAssembler assembler(data, /*capacity=*/64, /*background=*/true);
//   assembler.prefetch(order, 0, 64);
//   Batch batch = assembler.take();      // waits for the worker if it is not done
//   assembler.prefetch(order, 64, 64);   // gathered while `batch` trains
//
// `pinned`: the buffers are page-locked host memory (a GPU run), so copies to the device can
// run without the host waiting (device/device.h's DeviceFeed); a buffer is reused only after
// the copy out of it has finished.
class BatchAssembler {
 public:
  BatchAssembler(const TensorDataset& dataset, int64_t capacity, bool background = false,
                 bool pinned = false);
  ~BatchAssembler();
  BatchAssembler(const BatchAssembler&) = delete;
  BatchAssembler& operator=(const BatchAssembler&) = delete;

  Batch gather(const std::vector<int64_t>& order, int64_t begin, int64_t count);
  void prefetch(const std::vector<int64_t>& order, int64_t begin, int64_t count);
  Batch take();
  // Waits for an outstanding prefetch and forgets it (a window left early).
  void drain();
  // Items of the samples at order[begin, begin + count): what their mean is taken over.
  int64_t items(const std::vector<int64_t>& order, int64_t begin, int64_t count) const;
  bool background() const { return worker_.joinable(); }
  const TensorDataset& dataset() const { return dataset_; }

 private:
  struct Slot {
    torch::Tensor inputs;  // token rows: flat, capacity x width, laid out at each batch's longest
    torch::Tensor targets;
    int64_t items = 0;    // of the rows last copied in
    int64_t longest = 0;  // token rows: the longest of them
  };
  void copy_into(Slot& slot, const int64_t* index, int64_t count);
  Batch batch_in(const Slot& slot, int64_t count) const;
  void work();

  const TensorDataset& dataset_;
  int64_t capacity_ = 0;  // samples per batch at most
  Slot slots_[2];
  int next_slot_ = 0;  // the slot the next prefetch fills
  // The outstanding prefetch: its slot, size and source; guarded by mutex_ in background mode.
  int pending_slot_ = -1;
  int64_t pending_count_ = 0;
  const int64_t* pending_index_ = nullptr;
  bool pending_done_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::thread worker_;
};

}  // namespace bigbatch
