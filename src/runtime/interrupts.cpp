#include "runtime/interrupts.h"

#include <signal.h>
#include <unistd.h>

#include <csignal>

namespace bigbatch {

namespace {
volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};

void on_signal(int signal_number) {
  if (g_signal != 0)
    _exit(128 + signal_number);  // the second signal: stop now
  g_signal = signal_number;
}
}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

bool InterruptGuard::requested() const {
  return g_signal != 0;
}
int InterruptGuard::signal_number() const {
  return g_signal;
}

}  // namespace bigbatch
