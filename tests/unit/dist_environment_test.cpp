#include "dist/environment.h"

#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "dist/launcher.h"
#include "report/run_events.h"

namespace bigbatch {
namespace {

EnvironmentLookup fake(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    const auto it = values.find(name);
    if (it == values.end())
      return std::nullopt;
    return it->second;
  };
}

std::string error_of(std::map<std::string, std::string> values) {
  try {
    read_dist_environment(fake(std::move(values)));
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Distributed);
    return e.what();
  }
  ADD_FAILURE() << "expected a distributed error";
  return {};
}

TEST(DistEnvironment, NoLauncherMeansOneProcess) {
  EXPECT_FALSE(read_dist_environment(fake({})).has_value());
}

TEST(DistEnvironment, TorchrunVariables) {
  const auto env = read_dist_environment(fake({{"RANK", "3"},
                                               {"WORLD_SIZE", "4"},
                                               {"LOCAL_RANK", "1"},
                                               {"MASTER_ADDR", "127.0.0.1"},
                                               {"MASTER_PORT", "29511"}}));
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_port, 29511);
  EXPECT_EQ(env->source, "torchrun");
  EXPECT_FALSE(env->agent_store);  // bigbatch launch: rank 0 serves the store itself
  EXPECT_EQ(env->relaunch, "");    // not started by bigbatch launch
}

TEST(DistEnvironment, BigbatchLaunchSaysHowToStartTheJobAgain) {
  // Issue 59 item 12: after Ctrl-C of a launch, the resume command is the launch command.
  const auto env =
      read_dist_environment(fake({{"RANK", "1"},
                                  {"WORLD_SIZE", "2"},
                                  {"MASTER_ADDR", "127.0.0.1"},
                                  {"MASTER_PORT", "29511"},
                                  {"BIGBATCH_RELAUNCH", "bigbatch launch --nproc 2"}}));
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->relaunch, "bigbatch launch --nproc 2");
  LaunchOptions two_hosts;
  two_hosts.nproc = 2;
  two_hosts.nnodes = 2;
  two_hosts.node_rank = 1;
  two_hosts.master_addr = "10.0.0.1";
  two_hosts.master_port = 29600;
  EXPECT_EQ(relaunch_prefix(two_hosts),
            "bigbatch launch --nproc 2 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 "
            "--master-port 29600");
  TrainingProgress at;
  at.step = 7;
  EXPECT_EQ(stopped_by_signal_line(2, at, StopPoint::AfterUpdate, "runs/a", env->relaunch),
            "stopped by signal 2 after update 7; checkpoint written, continue with: bigbatch "
            "launch --nproc 2 -- bigbatch train --resume runs/a");
  EXPECT_EQ(stopped_by_signal_line(2, at, StopPoint::AfterUpdate, "runs/a"),
            "stopped by signal 2 after update 7; checkpoint written, continue with: bigbatch "
            "train --resume runs/a");
}

TEST(DistEnvironment, UnderTorchrunsAgentEveryRankIsAStoreClient) {
  const auto env = read_dist_environment(fake({{"RANK", "0"},
                                               {"WORLD_SIZE", "2"},
                                               {"MASTER_ADDR", "127.0.0.1"},
                                               {"MASTER_PORT", "29511"},
                                               {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  ASSERT_TRUE(env.has_value());
  EXPECT_TRUE(env->agent_store);
}

TEST(DistEnvironment, OpenMpiAndSlurmVariables) {
  const auto mpi = read_dist_environment(fake({{"OMPI_COMM_WORLD_RANK", "1"},
                                               {"OMPI_COMM_WORLD_SIZE", "2"},
                                               {"MASTER_ADDR", "127.0.0.1"},
                                               {"MASTER_PORT", "29500"}}));
  ASSERT_TRUE(mpi.has_value());
  EXPECT_EQ(mpi->source, "Open MPI");
  EXPECT_EQ(mpi->rank, 1);
  EXPECT_EQ(mpi->local_rank, 1);  // defaults to the rank without a local rank
  const auto slurm = read_dist_environment(fake({{"SLURM_PROCID", "0"},
                                                 {"SLURM_NTASKS", "8"},
                                                 {"SLURM_LOCALID", "0"},
                                                 {"MASTER_ADDR", "127.0.0.1"},
                                                 {"MASTER_PORT", "29500"}}));
  ASSERT_TRUE(slurm.has_value());
  EXPECT_EQ(slurm->source, "Slurm");
  EXPECT_EQ(slurm->world_size, 8);
}

TEST(DistEnvironment, AWorldOfOneNeedsNoRendezvous) {
  const auto env = read_dist_environment(fake({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->world_size, 1);
}

TEST(DistEnvironment, BadVariablesAreOneLineErrors) {
  EXPECT_NE(
      error_of(
          {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}})
          .find("RANK=2 is not below WORLD_SIZE=2"),
      std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}})
                .find("MASTER_PORT is not set"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}})
                .find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(
      error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}})
          .find("not a TCP port"),
      std::string::npos);
  EXPECT_NE(error_of({{"RANK", "one"}, {"WORLD_SIZE", "2"}}).find("RANK='one'"), std::string::npos);
  EXPECT_NE(error_of({{"WORLD_SIZE", "2"}}).find("RANK is not set"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("at least 1"), std::string::npos);
}

}  // namespace
}  // namespace bigbatch
