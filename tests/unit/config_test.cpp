#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "config/option_table.h"
#include "config/resolved_run.h"
#include "core/error.h"
#include "core/text.h"

namespace bigbatch {
namespace {

class ConfigFileTest : public ::testing::Test {
 protected:
  std::string path_ =
      (std::filesystem::temp_directory_path() /
       ("bigbatch_config_test_" +
        std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".toml"))
          .string();
  void write(const std::string& text) { std::ofstream(path_) << text; }
  std::string error_of() {
    TrainConfig config;
    try {
      load_toml_config(config, path_);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Config);
      return e.what();
    }
    ADD_FAILURE() << "expected a config error";
    return {};
  }
  void TearDown() override { std::filesystem::remove(path_); }
};

TEST_F(ConfigFileTest, KeysMirrorTheFlags) {
  write(
      "model = \"mlp\"\nglobal-batch = 1024\nmicro-batch = 64\nlr = 0.05\nlr-scaling = \"linear\"\n"
      "warmup = \"2e\"\nhidden = [128, 64]\nnesterov = false\n");
  TrainConfig config;
  load_toml_config(config, path_);
  EXPECT_EQ(config.model, "mlp");
  EXPECT_EQ(config.global_batch, 1024);
  EXPECT_EQ(config.micro_batch, 64);
  EXPECT_EQ(config.lr, 0.05);
  EXPECT_EQ(config.lr_scaling, LrScaling::Linear);
  EXPECT_EQ(config.warmup.to_string(), "2e");
  EXPECT_EQ(config.hidden, (std::vector<int64_t>{128, 64}));
  EXPECT_FALSE(config.nesterov);
}

TEST_F(ConfigFileTest, ValuesOfAnotherTypeAreRefusedNotCoerced) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"epochs = '2'\n", "key 'epochs' is the string '2', but it takes an integer"},
      {"epochs = 2.0\n", "key 'epochs' is the float 2, but it takes an integer"},
      {"no-shuffle = 1\n", "key 'no-shuffle' is the integer 1, but it takes true or false"},
      {"hidden = [1e3]\n", "key 'hidden' is the float 1000, but it takes integers"},
      {"lr = '0.1'\n", "key 'lr' is the string '0.1', but it takes a number"},
  };
  for (const auto& [text, fragment] : cases) {
    write(text);
    const std::string message = error_of();
    EXPECT_NE(message.find(fragment), std::string::npos) << text << ": " << message;
    EXPECT_NE(message.find("write it as"), std::string::npos) << message;
  }
  // What each type takes: an integer for a rate, "auto" for a batch, one integer for a list.
  write("lr = 1\nglobal-batch = 'auto'\neval-every = '500u'\nhidden = 64\nno-shuffle = true\n");
  TrainConfig config;
  load_toml_config(config, path_);
  EXPECT_EQ(config.lr, 1.0);
  EXPECT_TRUE(config.global_batch_auto);
  EXPECT_EQ(config.hidden, (std::vector<int64_t>{64}));
  EXPECT_FALSE(config.shuffle);
}

TEST(ConfigValidate, FlagsOfAnotherKindOfDataAreRefusedNotIgnored) {
  const auto problem = [](const TrainConfig& config) -> std::string {
    try {
      config.validate();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  TrainConfig text;
  text.model = "gpt";
  text.dataset = "text:corpus.txt";
  text.text_field = "body";
  EXPECT_NE(problem(text).find("--text-field names the field of jsonl:FILE's records"),
            std::string::npos);
  TrainConfig jsonl;
  jsonl.model = "gpt";
  jsonl.dataset = "jsonl:docs.jsonl";
  jsonl.doc_separator = "blank";
  EXPECT_NE(problem(jsonl).find("--doc-separator cuts text:PATH files into documents"),
            std::string::npos);
  EXPECT_NE(problem(jsonl).find("its records"), std::string::npos);
  jsonl.doc_separator = "%";
  jsonl.text_field = "body";
  EXPECT_EQ(problem(jsonl), "");
  TrainConfig images;
  images.doc_separator = "blank";
  EXPECT_NE(problem(images).find("is not text:PATH"), std::string::npos);
}

TEST(ConfigValidate, ASeparatorWithALineBreakIsSaidOnOneLine) {
  // Issue 36: it never matches (text is cut into lines first), and its error ran over two lines.
  TrainConfig config;
  config.model = "gpt";
  config.dataset = "text:corpus.txt";
  config.doc_separator = "%\n%";
  try {
    config.validate();
    FAIL() << "a separator with a line break was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--doc-separator '%\\n%' holds a line break"), std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_F(ConfigFileTest, UnknownKeySuggestsTheClosest) {
  write("lerning-rate = 0.1\n");
  EXPECT_NE(error_of().find("unknown key 'lerning-rate'"), std::string::npos);
  write("micro-bach = 8\n");
  EXPECT_NE(error_of().find("did you mean 'micro-batch'?"), std::string::npos);
}

TEST_F(ConfigFileTest, SyntaxErrorsGiveLineAndColumn) {
  write("model = \"mlp\"\nlr = = 3\n");
  EXPECT_NE(error_of().find("line 2"), std::string::npos);
}

TEST_F(ConfigFileTest, BadValuesNameTheKey) {
  write("global-batch = \"many\"\n");
  EXPECT_NE(error_of().find("--global-batch expects an integer, got 'many'"), std::string::npos);
  write("schedule = \"exponential\"\n");
  EXPECT_NE(error_of().find("schedule 'exponential' is not known"), std::string::npos);
  write("lr = [[1]]\n");
  EXPECT_NE(error_of().find("takes one value, not a list"), std::string::npos);
  write("hidden = [[1]]\n");
  EXPECT_NE(error_of().find("unsupported type"), std::string::npos);
}

TEST_F(ConfigFileTest, MissingFileIsAClearError) {
  EXPECT_NE(error_of().find("does not exist"), std::string::npos);
}

TEST_F(ConfigFileTest, RenderedConfigLoadsBackToTheSameRun) {
  TrainConfig original;
  original.model = "cnn-gn";
  original.global_batch = 512;
  original.micro_batch = 16;
  original.lr_ref_batch = 128;
  original.lr_scaling = LrScaling::Sqrt;
  original.warmup = Interval::parse("300u");
  original.schedule = ScheduleKind::Step;
  original.step_milestones = {Interval::parse("3e"), Interval::parse("6e")};
  original.shuffle = false;
  original.max_updates = 7;
  original.seed = 9;
  original.device = DeviceChoice::parse("cuda:1");
  write(render_toml_config(original));
  TrainConfig loaded;
  load_toml_config(loaded, path_);
  EXPECT_EQ(render_toml_config(loaded), render_toml_config(original));
  EXPECT_EQ(loaded.model, "cnn-gn");
  EXPECT_FALSE(loaded.shuffle);
  EXPECT_EQ(loaded.step_milestones.size(), 2u);
  EXPECT_EQ(loaded.max_updates, 7);
  EXPECT_EQ(loaded.device, original.device);
}

TEST(DeviceChoiceTest, ParsesEveryFormAndPrintsItBack) {
  EXPECT_EQ(DeviceChoice::parse("cpu"), (DeviceChoice{DeviceKind::Cpu, -1}));
  EXPECT_EQ(DeviceChoice::parse("auto"), (DeviceChoice{DeviceKind::Auto, -1}));
  EXPECT_EQ(DeviceChoice::parse("cuda"), (DeviceChoice{DeviceKind::Cuda, -1}));
  EXPECT_EQ(DeviceChoice::parse(" cuda:3 "), (DeviceChoice{DeviceKind::Cuda, 3}));
  for (const char* text : {"cpu", "auto", "cuda", "cuda:0", "cuda:12"})
    EXPECT_EQ(DeviceChoice::parse(text).to_string(), text);
  EXPECT_EQ(TrainConfig{}.device.to_string(), "cpu");  // the default computes where it did
}

TEST(DeviceChoiceTest, NearMissesNameTheDeviceMeant) {
  const auto error_of = [](const std::string& text) {
    try {
      DeviceChoice::parse(text);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Config);
      return std::string(e.what());
    }
    ADD_FAILURE() << text << " was taken";
    return std::string();
  };
  EXPECT_NE(error_of("gpu").find("did you mean 'cuda'?"), std::string::npos);
  EXPECT_NE(error_of("gpu:2").find("did you mean 'cuda:2'?"), std::string::npos);
  EXPECT_NE(error_of("cuda2").find("did you mean 'cuda:2'?"), std::string::npos);
  EXPECT_NE(error_of("cpuu").find("did you mean 'cpu'?"), std::string::npos);
  EXPECT_NE(error_of("cuda:-1").find("names no device index"), std::string::npos);
  EXPECT_NE(error_of("cuda:").find("names no device index"), std::string::npos);
  EXPECT_NE(error_of("CUDA").find("did you mean 'cuda'?"), std::string::npos);
  EXPECT_NE(error_of("Cuda:1").find("did you mean 'cuda:1'?"), std::string::npos);
  // Other frameworks' back-ends are named as such, not mistaken for a typo of "cpu".
  for (const char* other : {"mps", "tpu", "xpu:0"})
    EXPECT_NE(error_of(other).find("is a device bigbatch does not compute on"), std::string::npos);
  const std::string unknown = error_of("potato");
  EXPECT_NE(unknown.find("--device 'potato' is not a device"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("cpu, cuda, cuda:N (a device index) or auto"), std::string::npos)
      << unknown;
}

TEST(TrainConfig, ValidationNamesTheFix) {
  TrainConfig config;
  config.model = "cnnn";
  try {
    config.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'cnn'"), std::string::npos) << e.what();
  }
  config = TrainConfig{};
  config.momentum = 1.5;
  EXPECT_THROW(config.validate(), Error);
  config = TrainConfig{};
  config.schedule = ScheduleKind::Step;
  EXPECT_THROW(config.validate(), Error);
  EXPECT_NO_THROW(TrainConfig{}.validate());
}

TEST(ResolvedRun, DefaultJobOnFashionMnist) {
  TrainConfig config;
  config.warmup = Interval::parse("1e");
  const ResolvedRun run = resolve_run(config, 60000, 1);
  EXPECT_EQ(run.plan.global_batch_size, 256);
  EXPECT_EQ(run.plan.accumulation_steps, 8);
  EXPECT_EQ(run.epoch.updates_per_epoch, 235);
  EXPECT_EQ(run.schedule.config().warmup_updates, 235);
  EXPECT_EQ(run.total_updates, config.epochs * 235);
}

TEST(ResolvedRun, ScheduleLengthDecaysOverItsOwnLengthThenHolds) {
  TrainConfig config;  // 8 epochs of 235 updates
  config.schedule_length = Interval::parse("2e");
  const ResolvedRun run = resolve_run(config, 60000, 1);
  EXPECT_EQ(run.total_updates, 8 * 235);
  EXPECT_EQ(run.schedule.config().total_updates, 2 * 235);
  EXPECT_GT(run.schedule.lr_at(2 * 235 - 1), 0.0);
  EXPECT_EQ(run.schedule.lr_at(2 * 235), 0.0) << "cosine's end, held";
  EXPECT_EQ(run.schedule.lr_at(8 * 235 - 1), 0.0);
  config.schedule_length = Interval::parse("0u");
  EXPECT_THROW(config.validate(), Error);
}

TEST(ResolvedRun, AutoScalingIsSqrtAndLinearForLars) {
  TrainConfig config;
  config.global_batch = 1024;
  config.lr_ref_batch = 256;
  config.lr = 0.1;
  ResolvedRun run = resolve_run(config, 60000, 1);
  EXPECT_EQ(run.schedule.config().scaling, LrScaling::Sqrt);
  EXPECT_DOUBLE_EQ(run.schedule.peak_lr(), 0.2);
  EXPECT_NE(run.schedule.describe_scaling().find("(sqrt)"), std::string::npos);
  EXPECT_FALSE(run.adam.has_value());
  config.optimizer = OptimizerKind::Lars;
  run = resolve_run(config, 60000, 1);
  EXPECT_EQ(run.schedule.config().scaling, LrScaling::Linear);
  EXPECT_DOUBLE_EQ(run.schedule.peak_lr(), 0.4);
  EXPECT_TRUE(run.schedule.warnings().empty());  // LARS's own rule

  config.optimizer = OptimizerKind::AdamW;
  config.lr = 1e-3;
  run = resolve_run(config, 60000, 1);
  EXPECT_EQ(run.schedule.config().scaling, LrScaling::Sqrt);
  EXPECT_DOUBLE_EQ(run.schedule.peak_lr(), 2e-3);
  EXPECT_FALSE(run.adam.has_value());  // the betas only with --adam-sqrt-adjust
  config.adam_sqrt_adjust = true;
  run = resolve_run(config, 60000, 1);
  ASSERT_TRUE(run.adam.has_value());
  EXPECT_NEAR(run.adam->beta1, 0.6, 1e-12);

  config.lr_scaling = LrScaling::Linear;  // the adjustment belongs to the sqrt rule
  EXPECT_THROW(resolve_run(config, 60000, 1), Error);
  config.optimizer = OptimizerKind::Sgd;  // and to Adam
  EXPECT_THROW(config.validate(), Error);
}

TEST(ResolvedRun, TheDefaultRateCarriesTheBatchItWasTunedAt) {
  // Unset: 0.05 tuned at 256, scaled to the run's batch and said so; a given rate is taken as
  // tuned at the run's batch (nothing scaled), and --lr-ref-batch names another.
  TrainConfig config;
  config.global_batch = 1024;
  ResolvedRun run = resolve_run(config, 60000, 1);
  EXPECT_EQ(run.schedule.config().reference_batch, 256);
  EXPECT_DOUBLE_EQ(run.schedule.peak_lr(), 0.1);
  EXPECT_EQ(run.schedule.describe_scaling(),
            "lr 0.05 @ 256 (the default rate's batch) -> 0.1 @ 1024 (sqrt)");
  config.global_batch = 256;
  EXPECT_DOUBLE_EQ(resolve_run(config, 60000, 1).schedule.peak_lr(), 0.05);
  config.global_batch = 1024;
  config.lr = 0.05;
  run = resolve_run(config, 60000, 1);
  EXPECT_EQ(run.schedule.config().reference_batch, 1024);
  EXPECT_DOUBLE_EQ(run.schedule.peak_lr(), 0.05);
  EXPECT_NE(run.schedule.describe_scaling().find("@ 1024 (--lr taken as tuned at this batch"),
            std::string::npos);
  config.lr_ref_batch = 64;
  run = resolve_run(config, 60000, 1);
  EXPECT_DOUBLE_EQ(run.schedule.peak_lr(), 0.2);
  EXPECT_EQ(run.schedule.describe_scaling(), "lr 0.05 @ 64 -> 0.2 @ 1024 (sqrt)");
  // Written out, the default names itself: a rerun of config.toml trains at the same rate.
  TrainConfig unset;
  unset.resolve_default_rate();
  EXPECT_EQ(unset.lr, 0.05);
  EXPECT_EQ(unset.lr_ref_batch, 256);
}

TEST(ResolvedRun, AnOlderRunsAutoIsTheRuleItResolvedToThen) {
  // config.toml now names the resolved rule; `auto` there is an older run's, whose auto was
  // linear for SGD and LARS: resumed with it, the run keeps its rates.
  TrainConfig older;
  older.complete_older_run();
  EXPECT_EQ(older.lr_scaling, LrScaling::Linear);
  older.lr_scaling = LrScaling::Auto;
  older.optimizer = OptimizerKind::AdamW;
  older.complete_older_run();
  EXPECT_EQ(older.lr_scaling, LrScaling::Sqrt);
  TrainConfig given;
  given.lr_scaling = LrScaling::None;
  given.complete_older_run();
  EXPECT_EQ(given.lr_scaling, LrScaling::None);
}

TEST(ResolvedRun, ScalingPastWhatHeldHereIsWarned) {
  TrainConfig config;
  config.lr = 0.05;
  config.lr_ref_batch = 256;
  config.global_batch = 512;  // 2x: both rules held
  config.lr_scaling = LrScaling::Linear;
  EXPECT_TRUE(resolve_run(config, 60000, 1).schedule.warnings().empty());
  config.global_batch = 1024;  // 4x: linear diverged for the cnn
  auto warnings = resolve_run(config, 60000, 1).schedule.warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("the linear rule takes the rate 0.05 @ 256 to 0.2 @ 1024 (4x the "
                             "batch): from the default job's rate it diverged at 4x"),
            std::string::npos)
      << warnings[0];
  config.lr_scaling = LrScaling::Sqrt;
  EXPECT_TRUE(resolve_run(config, 60000, 1).schedule.warnings().empty());
  config.global_batch = 4096;  // 16x: past what any rule held
  warnings = resolve_run(config, 60000, 1).schedule.warnings();
  ASSERT_EQ(warnings.size(), 1u);
  // Measured with SGD: AdamW's rates are not judged by it.
  config.optimizer = OptimizerKind::AdamW;
  EXPECT_TRUE(resolve_run(config, 60000, 1).schedule.warnings().empty());
  config.optimizer = OptimizerKind::Sgd;
  EXPECT_NE(
      warnings[0].find("the sqrt rule takes the rate 0.05 @ 256 to 0.2 @ 4096 (16x the "
                       "batch): past 4x no rule beat the unscaled rate for the built-in image "
                       "models with SGD"),
      std::string::npos)
      << warnings[0];
}

TEST(ResolvedRun, MaxUpdatesBoundsTheRun) {
  TrainConfig config;
  config.max_updates = 300;
  const ResolvedRun run = resolve_run(config, 60000, 1);
  EXPECT_EQ(run.total_updates, 300);
  EXPECT_EQ(run.epochs, 2);
}

TEST(ResolvedRun, AdaScaleCountsTheScheduleAtTheReferenceBatch) {
  TrainConfig config;
  config.global_batch = 1024;
  config.micro_batch = 128;
  config.lr_ref_batch = 64;
  config.lr = 0.05;
  config.lr_scaling = LrScaling::AdaScale;
  config.epochs = 2;
  config.warmup = Interval::parse("0.5e");
  const ResolvedRun run = resolve_run(config, 60000, 1);
  ASSERT_TRUE(run.adascale.has_value());
  EXPECT_DOUBLE_EQ(run.adascale->scale, 16);
  // 60000 / 64 = 937.5 -> 938 reference updates per epoch; warmup and length count those.
  EXPECT_EQ(run.adascale->scale_invariant_total, 2 * 938);
  EXPECT_EQ(run.schedule.config().total_updates, 2 * 938);
  EXPECT_EQ(run.schedule.config().warmup_updates, 469);
  EXPECT_DOUBLE_EQ(run.schedule.peak_lr(), 0.05);  // the gain does the scaling
  // A gain of 1 throughout bounds the run: T_SI updates of 1024, in 32 epochs of 59.
  EXPECT_EQ(run.total_updates, 2 * 938);
  EXPECT_EQ(run.epochs, 32);
  EXPECT_NE(run.schedule.describe_scaling().find("AdaScale gain in [1, 16]"), std::string::npos);
}

TEST(ResolvedRun, AdaScaleNamesWhatItNeeds) {
  TrainConfig config;
  config.global_batch = 1024;
  config.micro_batch = 128;
  config.lr_scaling = LrScaling::AdaScale;
  config.lr = 0.05;  // a rate given (the default one carries its batch, 256)
  const auto message = [&] {
    try {
      resolve_run(config, 60000, 1);
    } catch (const Error& e) {
      return std::string(e.what()) + " | " + e.hint();
    }
    return std::string("no error");
  };
  EXPECT_NE(message().find("needs --lr-ref-batch"), std::string::npos) << message();
  config.lr_ref_batch = 64;
  config.optimizer = OptimizerKind::AdamW;
  EXPECT_NE(message().find("defined for SGD"), std::string::npos) << message();
  config.optimizer = OptimizerKind::Sgd;
  config.micro_batch = 1024;  // one micro-step and one rank: a single batch size per update
  EXPECT_NE(message().find("two batch sizes"), std::string::npos) << message();
  // Two ranks give the second batch size without accumulation.
  config.micro_batch = 512;
  EXPECT_NO_THROW(resolve_run(config, 60000, 2));
  config.micro_batch = 128;
  config.noise_scale = false;
  EXPECT_NE(message().find("--no-noise-scale"), std::string::npos) << message();
}

TEST(Text, LossesAreReadableAtAnySize) {
  EXPECT_EQ(format_loss(0.40651), "0.4065");
  EXPECT_EQ(format_loss(2.3), "2.3000");
  // A diverged run's loss printed 4615217544532970880618201088.0000 (issue 20).
  EXPECT_EQ(format_loss(4.615217544532970880618201088e27), "4.615e+27");
  EXPECT_EQ(format_loss(12345.6), "1.235e+04");
}

TEST(Text, StrictNumbers) {
  EXPECT_EQ(parse_int("42"), 42);
  EXPECT_EQ(parse_int("+7"), 7);
  EXPECT_FALSE(parse_int("12 gigs"));
  EXPECT_FALSE(parse_int("1.5"));
  EXPECT_FALSE(parse_int(""));
  EXPECT_DOUBLE_EQ(*parse_double("1e-3"), 1e-3);
  EXPECT_FALSE(parse_double("nan"));
  EXPECT_FALSE(parse_double("0.1x"));
}

TEST(Text, HumanReadable) {
  EXPECT_EQ(human_duration(75.2), "1m15s");
  EXPECT_EQ(human_duration(3700), "1h01m");
  EXPECT_EQ(human_count(12345), "12.3k");
  EXPECT_EQ(format_double(0.1), "0.1");
  EXPECT_EQ(closest_match("--lrr", {"--lr", "--model"}), std::optional<std::string>("--lr"));
  EXPECT_FALSE(closest_match("--zzzzzzzz", {"--lr"}).has_value());
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(3 * 1048576.0), "3.0 MiB");
  EXPECT_EQ(human_bytes(1.5 * 1073741824.0), "1.5 GiB");
}

TEST(Text, ByteSizesNeedAUnit) {
  EXPECT_EQ(parse_byte_size("512MiB"), 512 * 1048576LL);
  EXPECT_EQ(parse_byte_size("512 MiB"), 512 * 1048576LL);
  EXPECT_EQ(parse_byte_size("1.5GiB"), 1610612736LL);
  EXPECT_EQ(parse_byte_size("64kib"), 65536);
  EXPECT_EQ(parse_byte_size("2GB"), 2000000000LL);
  EXPECT_EQ(parse_byte_size("100B"), 100);
  EXPECT_EQ(parse_byte_size("1g"), 1073741824LL);
  for (int64_t bytes : {int64_t{1} << 29, int64_t{1} << 40, int64_t{3} << 10, int64_t{1000}})
    EXPECT_EQ(parse_byte_size(exact_byte_size(bytes)), bytes) << exact_byte_size(bytes);
  EXPECT_EQ(exact_byte_size(int64_t{512} << 20), "512MiB");
  // Anything else is an error, never a silent number of bytes.
  for (const char* bad : {"12 gigs", "512", "", "MiB", "-1MiB", "1e400GiB", "1.2.3MiB", "5 MiBs",
                          "1eMiB", "nanGiB", "99999999TiB"}) {
    EXPECT_FALSE(parse_byte_size(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace bigbatch

namespace bigbatch {
namespace {

// Issue 20 item 13: config.toml holds numbers the shortest way that reads back to the same
// double, not toml++'s 17 digits ("0.90000000000000002").
TEST(ConfigToml, AnOlderIdxRunGetsTheNormalisationItTrainedWith) {
  // A config.toml from before pixel-mean/pixel-std were recorded: that run used Fashion-MNIST's
  // constants, so a resume or an evaluation must too (not a new measurement).
  TrainConfig older;
  load_toml_config_text(older, "model = 'mlp'\ndataset = 'fashion-mnist'\n", "config.toml");
  older.complete_older_run();
  EXPECT_EQ(older.pixel_mean, kFashionMnistPixelMean);
  EXPECT_EQ(older.pixel_std, kFashionMnistPixelStd);
  // A newer one keeps what it recorded; other datasets have nothing to complete.
  TrainConfig newer;
  load_toml_config_text(newer, "pixel-mean = 0.25\npixel-std = 0.5\n", "config.toml");
  newer.complete_older_run();
  EXPECT_EQ(newer.pixel_mean, 0.25);
  TrainConfig text;
  load_toml_config_text(text, "dataset = 'text:/usr/share/games/fortunes'\n", "config.toml");
  text.complete_older_run();
  EXPECT_EQ(text.pixel_std, 0);
  // Recorded values round-trip exactly through config.toml.
  TrainConfig measured;
  measured.pixel_mean = 0.28604060219395294;
  measured.pixel_std = 0.3530242495179735;
  TrainConfig again;
  load_toml_config_text(again, render_toml_config(measured), "config.toml");
  EXPECT_EQ(again.pixel_mean, measured.pixel_mean);
  EXPECT_EQ(again.pixel_std, measured.pixel_std);
}

TEST(ConfigToml, ARunRecordsTheFilesItReadsByAbsolutePaths) {
  // Issue 35: evaluate, predict, sample and --resume from another directory find them.
  const std::string here = std::filesystem::current_path().string();
  TrainConfig config;
  config.dataset = "npy:data/../arrays";
  config.model = "torchscript:m.pt";
  config.tokenizer = "sentencepiece:/abs/sp.model";
  config.init_weights = "w.safetensors";
  config.save_weights = "out.safetensors";
  config.out = "runs/a";
  const TrainConfig absolute = config.with_absolute_paths();
  EXPECT_EQ(absolute.dataset, "npy:" + here + "/arrays");
  EXPECT_EQ(absolute.model, "torchscript:" + here + "/m.pt");
  EXPECT_EQ(absolute.tokenizer, "sentencepiece:/abs/sp.model");
  EXPECT_EQ(absolute.init_weights, here + "/w.safetensors");
  // What it writes stays as given: a rerun of the config writes where it runs.
  EXPECT_EQ(absolute.save_weights, "out.safetensors");
  EXPECT_EQ(absolute.out, "runs/a");
  for (const char* name : {"fashion-mnist", "cpp:spirals"}) {
    config.dataset = name;
    EXPECT_EQ(config.with_absolute_paths().dataset, name);
  }
  config.model = "mlp";
  config.tokenizer = "byte";
  config.init_weights.clear();
  EXPECT_EQ(config.with_absolute_paths().model, "mlp");
  EXPECT_EQ(config.with_absolute_paths().tokenizer, "byte");
  EXPECT_EQ(config.with_absolute_paths().init_weights, "");
}

TEST(ConfigToml, ASwitchPairWritesItsStateOnceAndAnUnsaidOneNotAtAll) {
  // --adam-sqrt-adjust / --no-adam-sqrt-adjust: unset writes nothing (the default decides),
  // either state one line under the positive name, read back to the same state; an older run's
  // file with `adam-sqrt-adjust = false` keeps it off.
  TrainConfig config;
  EXPECT_EQ(render_toml_config(config).find("adam-sqrt-adjust"), std::string::npos);
  EXPECT_EQ(flags_set_in(config, {}).find("adam-sqrt-adjust"), std::string::npos);
  for (const bool state : {true, false}) {
    config.adam_sqrt_adjust = state;
    const std::string text = render_toml_config(config);
    EXPECT_NE(text.find(std::string("\nadam-sqrt-adjust = ") + (state ? "true" : "false") + "\n"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("no-adam-sqrt-adjust"), std::string::npos) << text;
    EXPECT_EQ(text.find("no-nesterov"), std::string::npos) << text;
    TrainConfig again;
    load_toml_config_text(again, text, "config.toml");
    EXPECT_EQ(again.adam_sqrt_adjust, state);
    EXPECT_NE(
        flags_set_in(config, {}).find(state ? " --adam-sqrt-adjust" : " --no-adam-sqrt-adjust"),
        std::string::npos);
  }
  TrainConfig written;
  load_toml_config_text(written, "no-adam-sqrt-adjust = true\n", "config.toml");
  EXPECT_EQ(written.adam_sqrt_adjust, false);
}

TEST(ConfigToml, NumbersAreTheShortestThatRoundTrip) {
  TrainConfig config;
  config.lr = 0.1 + 0.2;  // 0.30000000000000004: needs its 17 digits
  const std::string text = render_toml_config(config);
  EXPECT_NE(text.find("\nmomentum = 0.9\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nweight-decay = 0.0005\n"), std::string::npos);
  EXPECT_NE(text.find("\nclip-norm = 0.0\n"), std::string::npos);  // still a TOML float
  EXPECT_NE(text.find("\nlr = 0.30000000000000004\n"), std::string::npos);
  EXPECT_EQ(text.find("0.90000000000000002"), std::string::npos);
  TrainConfig again;
  load_toml_config_text(again, text, "config.toml");
  EXPECT_EQ(again.lr, config.lr);
  EXPECT_EQ(render_toml_config(again), text);
}

}  // namespace
}  // namespace bigbatch

namespace bigbatch {
namespace {

TEST(StopTargetTest, ParsesMetricSplitDirectionAndValue) {
  const StopTarget bpb = StopTarget::parse(" val_bpb <= 1.9 ");
  EXPECT_EQ(bpb.split, "val");
  EXPECT_EQ(bpb.metric, "bpb");
  EXPECT_FALSE(bpb.at_least);
  EXPECT_DOUBLE_EQ(bpb.value, 1.9);
  EXPECT_TRUE(bpb.reached(1.9));
  EXPECT_FALSE(bpb.reached(1.91));
  EXPECT_EQ(bpb.to_string(), "val_bpb<=1.9");
  EXPECT_EQ(StopTarget::parse(bpb.to_string()).to_string(), bpb.to_string());
  // No split: validation when there is one, else test (--target-accuracy's rule).
  const StopTarget accuracy = StopTarget::parse("accuracy>=0.9");
  EXPECT_EQ(accuracy.metric_in(true), "val_accuracy");
  EXPECT_EQ(accuracy.metric_in(false), "test_accuracy");
  EXPECT_EQ(StopTarget::parse("test_rmse<=0.1").metric_in(true), "test_rmse");
  EXPECT_EQ(StopTarget::accuracy(0.9).to_string(), "accuracy>=0.9");
}

TEST(StopTargetTest, RefusesTargetsThatCannotMeanAGoal) {
  for (const char* text : {"val_bpb", "val_bpb>=1.9", "val_accuracy<=0.9", "val_accuracy>=90",
                           "val_acc>=0.9", "val_loss<=-1", "val_loss<=x", "val_loss<=inf", "",
                           "val_test_loss<=1", "perplexity<=0.5"}) {
    EXPECT_THROW(StopTarget::parse(text), Error) << text;
  }
}

TEST(StopTargetTest, ConfigTakesOneOfTargetAndTargetAccuracy) {
  TrainConfig config;
  apply_option(config, find_option("target"), "val_loss <= 0.5");
  EXPECT_EQ(config.target, "val_loss<=0.5");  // normalised for config.toml and the rank check
  ASSERT_TRUE(config.stop_target().has_value());
  EXPECT_EQ(config.stop_target()->metric, "loss");
  config.target_accuracy = 0.9;
  EXPECT_THROW(config.validate(), Error);
  config.target.clear();
  EXPECT_EQ(config.stop_target()->to_string(), "accuracy>=0.9");
}

}  // namespace
}  // namespace bigbatch
