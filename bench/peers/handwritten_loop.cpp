// The peer a C++ user would write from libtorch's examples: an nn::Sequential, SGD with
// momentum, and the standard accumulation loop (loss / accum; backward; step every accum),
// on in-memory data gathered by index_select — Fashion-MNIST normalised as bigbatch does (read
// with bigbatch's IDX reader, since libtorch's MNIST reader takes no .gz; loading is not
// timed), or random data with --data random. It also measures the machine's GEMM ceilings: fp32,
// and bf16 (libtorch's CPU kernel for it, the one --precision bf16 runs on).
// Prints one JSON object. Benchmarks only; never part of the product.
//
//   handwritten_loop --model cnn --micro 64 --accum 8 --threads 1 --updates 30
//   handwritten_loop --model gpt --seq-len 256 --layers 4 --d-model 128 --heads 4 --micro 8
//   handwritten_loop --gemm --threads 1
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "config/train_config.h"  // the normalisation bigbatch uses on Fashion-MNIST
#include "data/idx_reader.h"      // .gz IDX files

namespace {

torch::nn::Sequential make(const std::string& name) {
  torch::nn::Sequential m;
  if (name == "mlp") {
    m->push_back(torch::nn::Flatten());
    m->push_back(torch::nn::Linear(784, 512));
    m->push_back(torch::nn::ReLU());
    m->push_back(torch::nn::Linear(512, 256));
    m->push_back(torch::nn::ReLU());
    m->push_back(torch::nn::Linear(256, 10));
    return m;
  }
  const bool bn = name == "cnn-bn";
  m->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).bias(!bn)));
  if (bn)
    m->push_back(torch::nn::BatchNorm2d(32));
  m->push_back(torch::nn::ReLU());
  m->push_back(torch::nn::MaxPool2d(2));
  m->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).bias(!bn)));
  if (bn)
    m->push_back(torch::nn::BatchNorm2d(64));
  m->push_back(torch::nn::ReLU());
  m->push_back(torch::nn::MaxPool2d(2));
  m->push_back(torch::nn::Flatten());
  m->push_back(torch::nn::Linear(1600, 128));
  m->push_back(torch::nn::ReLU());
  m->push_back(torch::nn::Linear(128, 10));
  return m;
}

// The gpt as a libtorch user writes it from the PyTorch twin (tests/python/gpt_oracle.py):
// token and position embeddings, pre-LayerNorm blocks with causal attention and a GELU MLP,
// the output tied to the token embedding; plain autograd, no fusion.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t d, int64_t heads)
      : heads(heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        qkv(register_module("qkv", torch::nn::Linear(d, 3 * d))),
        proj(register_module("proj", torch::nn::Linear(d, d))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        fc(register_module("fc", torch::nn::Linear(d, 4 * d))),
        out(register_module("out", torch::nn::Linear(4 * d, d))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads;
    auto parts = qkv->forward(ln1->forward(x)).chunk(3, -1);
    auto split = [&](const torch::Tensor& z) { return z.view({b, t, heads, hd}).transpose(1, 2); };
    auto q = split(parts[0]) * (1.0 / std::sqrt(double(hd))), k = split(parts[1]),
         v = split(parts[2]);
    auto scores = torch::matmul(q, k.transpose(-2, -1))
                      .masked_fill(torch::ones({t, t}, torch::kBool).triu(1), -INFINITY);
    auto y = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({b, t, d});
    auto h = x + proj->forward(y);
    return h + out->forward(torch::gelu(fc->forward(ln2->forward(h))));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc, out;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl(int64_t vocab, int64_t seq, int64_t layers, int64_t d, int64_t heads)
      : token(register_module("token", torch::nn::Embedding(vocab, d))),
        position(register_module("position", torch::nn::Embedding(seq, d))),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))) {
    for (int64_t i = 0; i < layers; ++i)
      blocks.push_back(register_module("block" + std::to_string(i), Block(d, heads)));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto x = token->forward(tokens) + position->forward(torch::arange(tokens.size(1)));
    for (auto& block : blocks)
      x = block->forward(x);
    return torch::matmul(ln_f->forward(x), token->weight.t());
  }
  torch::nn::Embedding token, position;
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f;
};
TORCH_MODULE(Gpt);

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"); 0 where unreadable.
long long status_bytes(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f)
    return 0;
  char line[256];
  long long kib = 0;
  const size_t length = std::strlen(field);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, field, length) == 0 && line[length] == ':')
      kib = std::atoll(line + length + 1);
  }
  std::fclose(f);
  return kib * 1024;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "cnn";
  int64_t micro = 64, accum = 1, threads = 1, updates = 30;
  int64_t seq = 256, layers = 4, d_model = 128, heads = 4;  // --model gpt
  bool gemm = false;
  std::string data = "fashion";
  const std::map<std::string, int64_t*> numbers = {
      {"--micro", &micro}, {"--accum", &accum},   {"--threads", &threads}, {"--updates", &updates},
      {"--seq-len", &seq}, {"--layers", &layers}, {"--d-model", &d_model}, {"--heads", &heads}};
  const std::map<std::string, std::string*> words = {{"--model", &model}, {"--data", &data}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--gemm") {
      gemm = true;
    } else if (i + 1 < argc && numbers.count(a)) {
      *numbers.at(a) = std::stoll(argv[++i]);
    } else if (i + 1 < argc && words.count(a)) {
      *words.at(a) = argv[++i];
    } else {
      std::fprintf(stderr, "handwritten_loop: unknown or incomplete flag %s\n", a.c_str());
      return 2;
    }
  }
  torch::set_num_threads(static_cast<int>(threads));
  if (gemm) {
    auto rate = [&](torch::ScalarType dtype, int64_t n) {
      auto a = torch::randn({n, n}).to(dtype), b = torch::randn({n, n}).to(dtype);
      for (int i = 0; i < 2; ++i)
        torch::mm(a, b);
      const int reps = 5;
      const double start = now();
      for (int i = 0; i < reps; ++i)
        torch::mm(a, b);
      return 2.0 * n * n * n * reps / (now() - start) / 1e9;
    };
    const double fp32 = rate(torch::kFloat32, 2048);
    // Where libtorch has no fast bf16 kernel for this CPU (2.15's MKL build on an AVX2-only
    // CPU: under 1 GFLOP/s), seven products of 2048^3 would take many minutes: a 256^3 probe
    // says so first, and is the figure then.
    const double bf16_probe = rate(torch::kBFloat16, 256);
    const double bf16 = bf16_probe < 0.1 * fp32 ? bf16_probe : rate(torch::kBFloat16, 2048);
    std::printf("{\"gemm_gflops\": %.1f, \"gemm_bf16_gflops\": %.1f}\n", fp32, bf16);
    return 0;
  }
  torch::manual_seed(0);
  if (model == "gpt") {
    // The accumulation loop with the exact mean for packed blocks (every micro-batch has the
    // same tokens: each one's mean over tokens / accum), AdamW and clipping, as
    // bench/lm_peer_bench.py runs bigbatch and Python.
    constexpr int64_t kVocab = 257;
    Gpt net(kVocab, seq, layers, d_model, heads);
    torch::optim::AdamW optimizer(net->parameters(),
                                  torch::optim::AdamWOptions(1e-3).weight_decay(5e-4));
    auto data = torch::randint(0, kVocab, {micro * accum * (updates + 3), seq + 1}, torch::kInt64);
    int64_t row = 0;
    auto gpt_update = [&] {
      for (int64_t k = 0; k < accum; ++k) {
        auto block = data.narrow(0, row, micro);
        row += micro;
        auto logits = net->forward(block.narrow(1, 0, seq));
        auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}),
                                                         block.narrow(1, 1, seq).reshape({-1})) /
                    static_cast<double>(accum);
        loss.backward();
      }
      torch::nn::utils::clip_grad_norm_(net->parameters(), 1.0);
      optimizer.step();
      optimizer.zero_grad();
    };
    for (int i = 0; i < 3; ++i)
      gpt_update();  // warm-up
    const double start = now();
    for (int64_t i = 0; i < updates; ++i)
      gpt_update();
    const double seconds = now() - start;
    std::printf("{\"tokens_per_s\": %.1f}\n", double(updates * accum * micro * seq) / seconds);
    return 0;
  }
  auto net = make(model);
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::Tensor images, labels;
  if (data == "random") {
    images = torch::randn({60000, 1, 28, 28});
    labels = torch::randint(0, 10, {60000}, torch::kInt64);
  } else {
    const std::string dir = "/usr/share/datasets/fashion-mnist/";
    auto pixels = bigbatch::read_idx_file(dir + "train-images-idx3-ubyte.gz");
    auto classes = bigbatch::read_idx_file(dir + "train-labels-idx1-ubyte.gz");
    images = torch::from_blob(pixels.data.data(), {pixels.count(), 1, 28, 28}, torch::kUInt8)
                 .to(torch::kFloat32)
                 .div_(255.0)
                 .sub_(bigbatch::kFashionMnistPixelMean)
                 .div_(bigbatch::kFashionMnistPixelStd);
    labels =
        torch::from_blob(classes.data.data(), {classes.count()}, torch::kUInt8).to(torch::kInt64);
  }
  const int64_t n = images.size(0);
  auto order = torch::randperm(n, torch::kInt64);
  int64_t position = 0;
  auto run_update = [&] {
    for (int64_t k = 0; k < accum; ++k) {
      if (position + micro > n)
        position = 0;
      auto index = order.narrow(0, position, micro);
      position += micro;
      auto loss = torch::nn::functional::cross_entropy(net->forward(images.index_select(0, index)),
                                                       labels.index_select(0, index)) /
                  static_cast<double>(accum);
      loss.backward();
    }
    optimizer.step();
    optimizer.zero_grad();
  };
  // Training's resident peak, as bigbatch reports it: reset the high-water mark after set-up.
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
  const long long rss_setup = status_bytes("VmRSS");
  for (int i = 0; i < 3; ++i)
    run_update();  // warm-up
  // Each update's duration too: its median is not moved by the machine's slow streaks.
  std::vector<double> update_seconds;
  const double start = now();
  for (int64_t i = 0; i < updates; ++i) {
    const double begin = now();
    run_update();
    update_seconds.push_back(now() - begin);
  }
  const double seconds = now() - start;
  std::nth_element(update_seconds.begin(), update_seconds.begin() + updates / 2,
                   update_seconds.end());
  std::printf(
      "{\"samples_per_s\": %.1f, \"updates_per_s\": %.3f, \"update_ms_median\": %.3f, "
      "\"rss_setup_bytes\": %lld, \"rss_peak_bytes\": %lld}\n",
      double(updates * accum * micro) / seconds, double(updates) / seconds,
      1e3 * update_seconds[updates / 2], rss_setup, status_bytes("VmHWM"));
  return 0;
}
