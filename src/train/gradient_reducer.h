#pragma once
// The one place where ranks meet during training (Flashlight's Reducer). The engine calls
// reduce() exactly once per update, on the last micro-step, with the *summed* local
// gradients and the local item count; it returns the global item count, after which the
// gradients hold the global sum. The single-process reducer is a no-op, so no training code
// branches on world_size == 1.
//
//   LocalReducer reducer;
//   int64_t items = reducer.reduce(grads, local_items);
#include <cstdint>
#include <vector>

namespace at {
class Tensor;
}

namespace bigbatch {

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  virtual int64_t reduce(std::vector<at::Tensor>& gradients, int64_t local_items) = 0;
  virtual int64_t world_size() const = 0;
  virtual int64_t rank() const = 0;
  // Collective calls issued so far (all-reduces); metrics report it per update.
  virtual int64_t calls() const = 0;
};

class LocalReducer final : public GradientReducer {
 public:
  int64_t reduce(std::vector<at::Tensor>& /*gradients*/, int64_t local_items) override {
    return local_items;
  }
  int64_t world_size() const override { return 1; }
  int64_t rank() const override { return 0; }
  int64_t calls() const override { return 0; }
};

}  // namespace bigbatch
