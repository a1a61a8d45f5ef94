#pragma once
// SIGINT / SIGTERM during training: the first one asks the loop to stop at the next update
// boundary (it then writes a checkpoint and exits 128 + signal); a second one exits at once.
// RAII: the handlers are installed for the guard's lifetime only.
//
//   InterruptGuard guard;
//   ... if (guard.requested()) { checkpoint(); throw Interrupted(guard.signal_number(), ...); }
namespace bigbatch {

class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  bool requested() const;
  int signal_number() const;
};

}  // namespace bigbatch
