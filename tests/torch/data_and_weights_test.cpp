#include <gtest/gtest.h>

#include <torch/torch.h>
#include <zlib.h>
#include <cmath>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/dataset.h"
#include "io/safetensors.h"
#include "models/models.h"

namespace bigbatch {
namespace {

class TempDir : public ::testing::Test {
 protected:
  std::string dir_ = [] {
    auto d = std::filesystem::temp_directory_path() /
             ("bigbatch_torch_test_" +
              std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d.string();
  }();
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void write_idx(const std::string& name, std::vector<uint32_t> dims,
                 const std::vector<uint8_t>& data) {
    std::vector<uint8_t> bytes = {0, 0, 8, static_cast<uint8_t>(dims.size())};
    for (uint32_t d : dims) {
      for (int shift : {24, 16, 8, 0})
        bytes.push_back(static_cast<uint8_t>(d >> shift));
    }
    bytes.insert(bytes.end(), data.begin(), data.end());
    gzFile gz = gzopen((dir_ + "/" + name + ".gz").c_str(), "wb");
    gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(gz);
  }

  // n images of 28x28 whose pixels all equal the sample index, labels index % 10.
  void write_dataset(const std::string& prefix, uint32_t n, uint8_t bad_label = 0) {
    std::vector<uint8_t> pixels, labels;
    for (uint32_t i = 0; i < n; ++i) {
      pixels.insert(pixels.end(), 28 * 28, static_cast<uint8_t>(i));
      labels.push_back(static_cast<uint8_t>(i % 10));
    }
    if (bad_label)
      labels.back() = bad_label;
    write_idx(prefix + "-images-idx3-ubyte", {n, 28, 28}, pixels);
    write_idx(prefix + "-labels-idx1-ubyte", {n}, labels);
  }

  std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected a bigbatch::Error";
    return {};
  }
};

TEST_F(TempDir, LoadsAndNormalisesIdxSplits) {
  write_dataset("train", 20);
  write_dataset("t10k", 5);
  const DatasetSplits splits = load_idx_dataset(dir_, /*train_subset=*/12, /*val_size=*/2);
  EXPECT_EQ(splits.train.size(), 10);
  EXPECT_EQ(splits.validation.size(), 2);
  EXPECT_EQ(splits.test.size(), 5);
  EXPECT_EQ(splits.train.inputs.sizes(), (std::vector<int64_t>{10, 1, 28, 28}));
  // Normalised by the training samples' own statistics (samples 0-9, pixel i / 255 each):
  // mean 4.5 / 255, standard deviation sqrt(8.25) / 255 — nothing of validation or test.
  EXPECT_NEAR(splits.pixels.mean, 4.5 / 255, 1e-8);  // of the float32 pixels
  EXPECT_NEAR(splits.pixels.std, std::sqrt(8.25) / 255, 1e-8);
  EXPECT_NEAR(splits.train.inputs[3][0][5][5].item<float>(), -1.5 / std::sqrt(8.25), 1e-5);
  EXPECT_NEAR(splits.test.inputs[0][0][0][0].item<float>(), -4.5 / std::sqrt(8.25), 1e-5);
  EXPECT_NEAR(splits.validation.inputs[0][0][0][0].item<float>(), 5.5 / std::sqrt(8.25), 1e-5);
  EXPECT_EQ(splits.validation.targets[0].item<int64_t>(), 0);  // sample 10, held out from the end
  EXPECT_EQ(splits.train.targets.scalar_type(), torch::kInt64);
  EXPECT_EQ(splits.train.classes, 10);  // the largest label + 1
  // A recorded normalisation (a resume, an evaluation) is used as it is.
  const DatasetSplits given = load_idx_dataset(dir_, 12, 2, {0.5, 0.25});
  EXPECT_NEAR(given.train.inputs[3][0][5][5].item<float>(), (3 / 255.0 - 0.5) / 0.25, 1e-5);
  EXPECT_EQ(given.pixels.mean, 0.5);
}

TEST_F(TempDir, IdxClassesComeFromTheLabels) {
  write_dataset("train", 20, /*bad_label=*/12);  // one sample of class 12: 13 classes
  write_dataset("t10k", 5);
  EXPECT_EQ(load_idx_dataset(dir_, 0, 0).train.classes, 13);
  write_dataset("train", 20);
  write_idx("t10k-labels-idx1-ubyte", {5}, {0, 1, 2, 3, 40});  // the test split's too
  const DatasetSplits splits = load_idx_dataset(dir_, 0, 0);
  EXPECT_EQ(splits.train.classes, 41);
  EXPECT_EQ(splits.test.classes, 41);
}

TEST_F(TempDir, BadDatasetsAreDataErrors) {
  write_dataset("train", 1);  // one image, one shade: no deviation to normalise by
  write_dataset("t10k", 5);
  EXPECT_NE(error_of([&] { load_idx_dataset(dir_, 0, 0); }).find("are all one shade"),
            std::string::npos);
  write_dataset("train", 20);
  write_idx("t10k-labels-idx1-ubyte", {4}, {1, 2, 3, 4});
  EXPECT_NE(error_of([&] { load_idx_dataset(dir_, 0, 0); }).find("holds 5 images but"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_idx_dataset(dir_ + "/nowhere", 0, 0); }).find("not found"),
            std::string::npos);
  write_dataset("t10k", 5);
  EXPECT_NE(error_of([&] { load_idx_dataset(dir_, 50, 0); }).find("--train-subset 50"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_idx_dataset(dir_, 0, 20); }).find("--val-size 20"),
            std::string::npos);
}

TEST_F(TempDir, AssemblerGathersPositionsOfTheOrder) {
  write_dataset("train", 20);
  write_dataset("t10k", 5);
  const DatasetSplits splits = load_idx_dataset(dir_, 0, 0);
  BatchAssembler assembler(splits.train, 4);
  const std::vector<int64_t> order = {7, 3, 19, 0, 5, 11};
  const Batch batch = assembler.gather(order, 1, 3);
  ASSERT_EQ(batch.size(), 3);
  EXPECT_EQ(batch.targets[0].item<int64_t>(), 3);
  EXPECT_EQ(batch.targets[1].item<int64_t>(), 9);
  EXPECT_TRUE(torch::equal(batch.inputs[2], splits.train.inputs[0]));
}

TEST(BatchAssembler, PrefetchedBatchesEqualGatheredOnesAndSurviveTheNextPrefetch) {
  torch::manual_seed(7);
  const TensorDataset data{torch::randn({200, 1, 28, 28}),
                           torch::randint(0, 10, {200}, torch::kInt64)};
  std::vector<int64_t> order(200);
  for (int64_t i = 0; i < 200; ++i)
    order[i] = (i * 37) % 200;
  for (bool background : {false, true}) {
    BatchAssembler prefetching(data, 16, background);
    BatchAssembler plain(data, 16);
    EXPECT_EQ(prefetching.background(), background);
    prefetching.prefetch(order, 0, 16);
    for (int64_t begin = 0; begin < 192; begin += 16) {
      const Batch batch = prefetching.take();
      const int64_t next = begin + 16;
      if (next < 192)
        prefetching.prefetch(order, next, next + 16 <= 192 ? 16 : 192 - next);
      // The batch in hand is untouched by the gather of the next one.
      const Batch expected = plain.gather(order, begin, 16);
      EXPECT_TRUE(torch::equal(batch.inputs, expected.inputs)) << begin << " " << background;
      EXPECT_TRUE(torch::equal(batch.targets, expected.targets)) << begin << " " << background;
    }
    // Leaving with a prefetch in flight, then gathering synchronously: no mix-up, no hang.
    prefetching.prefetch(order, 100, 7);
    prefetching.drain();
    EXPECT_TRUE(
        torch::equal(prefetching.gather(order, 50, 5).targets, plain.gather(order, 50, 5).targets));
    prefetching.prefetch(order, 10, 3);  // destroyed with a prefetch outstanding
  }
}

TEST(SampleLayout, BlankSamplesBuildTheSameModelAsTheData) {
  // Issue 35: predict builds the model from the weights' record of the samples, not the data.
  TensorDataset images;
  images.inputs = torch::rand({5, 1, 28, 28});
  images.targets = torch::tensor({0, 3, 9, 1, 2}, torch::kInt64);
  images.classes = 10;
  const auto layout = sample_layout(images);
  EXPECT_EQ(layout.at("sample_shape"), "1,28,28");
  EXPECT_EQ(layout.at("targets"), "classes 10");
  const auto blank = blank_samples(layout);
  ASSERT_TRUE(blank.has_value());
  EXPECT_EQ(blank->inputs.sizes(), (std::vector<int64_t>{2, 1, 28, 28}));
  EXPECT_EQ(blank->outputs(), 10);
  EXPECT_FALSE(blank->is_regression());

  TensorDataset values;
  values.inputs = torch::rand({4, 8});
  values.targets = torch::rand({4, 3});
  const auto three = blank_samples(sample_layout(values));
  ASSERT_TRUE(three.has_value());
  EXPECT_TRUE(three->is_regression());
  EXPECT_EQ(three->outputs(), 3);
  EXPECT_EQ(three->targets.dim(), 2);
  values.targets = torch::rand({4});
  EXPECT_EQ(sample_layout(values).at("targets"), "values");
  EXPECT_EQ(blank_samples(sample_layout(values))->targets.dim(), 1);

  // Weights from before the layout was recorded, or a record that cannot be read: none.
  EXPECT_FALSE(blank_samples({{"model", "mlp"}}).has_value());
  for (const auto& [shape, targets] :
       std::vector<std::pair<std::string, std::string>>{{"1,28", "classes 10"},
                                                        {"1,x,28", "classes 10"},
                                                        {"-1,28,28", "classes 10"},
                                                        {"8", "classes 0"},
                                                        {"8", "values 99999999999"},
                                                        {"8", "labels 3"},
                                                        {"8", "values 3 4"},
                                                        {"", "values"}}) {
    EXPECT_FALSE(blank_samples({{"sample_shape", shape}, {"targets", targets}}).has_value())
        << shape << " / " << targets;
  }
}

TEST_F(TempDir, WeightsRoundTripIncludingBatchNormBuffers) {
  torch::manual_seed(1);
  auto saved = make_model({"cnn-bn"});
  saved->forward(torch::randn({4, 1, 28, 28}));  // moves the running statistics
  const std::string path = dir_ + "/w.safetensors";
  save_weights(path, *saved, {{"model", "cnn-bn"}});
  torch::manual_seed(2);
  auto loaded = make_model({"cnn-bn"});
  load_weights(path, *loaded);
  const auto a = model_state(*saved);
  const auto b = model_state(*loaded);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
  std::map<std::string, std::string> metadata;
  load_safetensors(path, &metadata);
  EXPECT_EQ(metadata.at("model"), "cnn-bn");
}

TEST_F(TempDir, WeightsOfAnotherModelAreRejectedAndLeaveTheModelUntouched) {
  auto mlp = make_model({"mlp"});
  const std::string path = dir_ + "/mlp.safetensors";
  save_weights(path, *mlp, {});
  auto cnn = make_model({"cnn"});
  const auto before = model_state(*cnn)[0].second.clone();
  EXPECT_NE(error_of([&] { load_weights(path, *cnn); }).find("saved from another model"),
            std::string::npos);
  EXPECT_TRUE(torch::equal(before, model_state(*cnn)[0].second));
  ModelSpec narrow{"mlp"};
  narrow.hidden = {64};
  auto small = make_model(narrow);
  EXPECT_FALSE(error_of([&] { load_weights(path, *small); }).empty());
  std::ofstream(dir_ + "/junk.safetensors") << "not a safetensors file at all";
  EXPECT_NE(
      error_of([&] { load_weights(dir_ + "/junk.safetensors", *mlp); }).find("safetensors file"),
      std::string::npos);
  EXPECT_NE(
      error_of([&] { load_weights(dir_ + "/missing.safetensors", *mlp); }).find("does not exist"),
      std::string::npos);
}

TEST(Models, ParameterNamesMatchPyTorchSequential) {
  auto cnn = make_model({"cnn"});
  std::vector<std::string> names;
  for (const auto& item : cnn->named_parameters())
    names.push_back(item.key());
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias", "7.weight",
                                             "7.bias", "9.weight", "9.bias"}));
  EXPECT_FALSE(uses_batch_statistics(*cnn));
  auto bn = make_model({"cnn-bn"});
  EXPECT_TRUE(uses_batch_statistics(*bn));
  EXPECT_EQ(parameter_count(*make_model({"mlp"})),
            784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
}

TEST(Models, InitialisationIsDeterministicPerSeed) {
  torch::manual_seed(5);
  auto a = make_model({"cnn"});
  torch::manual_seed(5);
  auto b = make_model({"cnn"});
  EXPECT_TRUE(torch::equal(model_state(*a)[0].second, model_state(*b)[0].second));
}

}  // namespace
}  // namespace bigbatch
