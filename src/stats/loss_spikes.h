#pragma once
// Early divergence: an update whose loss is far above the run's recent range. A run whose
// rate is too high rarely jumps to infinity at once; its loss climbs over a few updates
// (the README's first mlp example went 5 -> 49 -> 731 -> ... -> 4e25 in eight), and every one
// of those updates made the weights worse. Compared with the median of the last applied
// updates, the first of them stands out by an order of magnitude — the factor of 10 that
// Megatron-LM's spiky-loss check uses. Such an update is skipped like a non-finite one: the
// weights and the optimizer state stay as they were, and the fit loop stops the run after
// --max-bad-updates of them in a row, before the weights are ruined.
//
// Torch-free and deterministic: the losses are reduced over all ranks, so every rank reaches
// the same verdict, and the recent losses travel in the checkpoint (TrainingProgress), so a
// resumed run judges as the uninterrupted one would.
//
//   std::vector<double> recent;                        // TrainingProgress::recent_losses
//   if (!is_loss_spike(recent, loss, /*factor=*/10)) remember_applied_loss(recent, loss);
#include <cstddef>
#include <vector>

namespace bigbatch {

// How many applied updates the median is taken over, and how many the guard waits for (the
// first updates of a run move fastest).
constexpr size_t kRecentLosses = 32;
constexpr size_t kLossesBeforeSpikeGuard = 8;

// The median of the recent applied losses, or 0 when there are too few to judge, or when
// they are not all positive (a loss that may be negative, such as a log-likelihood written
// by a user's module, has no scale a ratio could be taken against).
double recent_loss_median(const std::vector<double>& recent);

// Whether a finite `loss` exceeds `factor` times that median (never when factor is 0 or the
// median is 0).
bool is_loss_spike(const std::vector<double>& recent, double loss, double factor);

// Adds an applied update's loss, dropping the oldest beyond kRecentLosses.
void remember_applied_loss(std::vector<double>& recent, double loss);

}  // namespace bigbatch
