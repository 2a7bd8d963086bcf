// SageMakerClusterResolver: the cluster of an Amazon SageMaker training job,
// from SM_HOSTS (a JSON list of host names) and SM_CURRENT_HOST.
//
// Hosts are sorted as text (algo-1, algo-10, algo-2), each listening on
// `port` (default 2223), as the single job "worker"; this task is
// ("worker", position of SM_CURRENT_HOST). When the current host is not in
// SM_HOSTS the whole configuration is empty (no jobs, no task), as in
// TensorFlow. Overrides and master() follow TFConfigClusterResolver (there is
// no session_master); nothing in the environment sets the rpc layer.
//
// Errors: FailedPrecondition "Not a SageMaker Environment" when either
// variable is unset; InvalidArgument naming SM_HOSTS when it is not a JSON
// list of strings ("" means no hosts).
//
// Thread safety: not thread-safe (see ClusterResolver).
#ifndef COHORT_CLUSTER_RESOLVERS_SAGEMAKER_CLUSTER_RESOLVER_H_
#define COHORT_CLUSTER_RESOLVERS_SAGEMAKER_CLUSTER_RESOLVER_H_

#include "cohort/cluster/resolvers/tf_config_cluster_resolver.h"

namespace cohort {

class SageMakerClusterResolver : public TFConfigClusterResolver {
 public:
  static constexpr int kDefaultPort = 2223;

  explicit SageMakerClusterResolver(Env* env, int port = kDefaultPort,
                                    Options options = Options())
      : TFConfigClusterResolver(env, std::move(options)), port_(port) {}

  std::string name() const override { return "sagemaker"; }
  // The configuration SM_HOSTS and SM_CURRENT_HOST describe, read now.
  absl::StatusOr<TfConfig> LoadConfig() override;

 private:
  int port_;
};

// Registers "sagemaker" (priority 30; detected when SM_HOSTS and
// SM_CURRENT_HOST are both set).
void RegisterSageMakerResolver(ResolverRegistry* registry);

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_SAGEMAKER_CLUSTER_RESOLVER_H_
