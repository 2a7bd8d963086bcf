// Blocking helper for the CLI: issues one coordination RPC and waits.
#ifndef COHORT_TOOLS_COHORT_COORD_CLI_CALL_H_
#define COHORT_TOOLS_COHORT_COORD_CLI_CALL_H_

#include "absl/synchronization/notification.h"
#include "cohort/coord/coordination_client.h"

namespace cohort::tools {

template <typename Request, typename Response>
absl::Status CallCoordinator(
    coord::CoordinationClient& client,
    void (coord::CoordinationClient::*method)(const Request&, Response*,
                                              const coord::CallOptions&,
                                              coord::StatusCallback),
    const Request& request, Response* response, absl::Duration timeout) {
  absl::Notification done;
  absl::Status status;
  coord::CallOptions options;
  options.timeout = timeout;
  (client.*method)(request, response, options, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

}  // namespace cohort::tools

#endif  // COHORT_TOOLS_COHORT_COORD_CLI_CALL_H_
