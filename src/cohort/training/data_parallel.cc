#include "cohort/training/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/base/status.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/checkpoint.h"
#include "cohort/graph/crc32c.h"
#include "cohort/graph/gradients.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/nn_ops.h"
#include "cohort/graph/kernels/random_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/graph/kernels/training_ops.h"
#include "cohort/graph/local_session.h"

namespace cohort::training {
namespace {

constexpr double kTwoPi = 6.283185307179586;

// Normals from mt19937_64 by Box-Muller (std::normal_distribution's
// algorithm is implementation-defined; this is the same everywhere).
class Normals {
 public:
  explicit Normals(uint64_t seed) : rng_(seed) {}
  float Next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    double u1, u2;
    do {
      u1 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    } while (u1 <= 0);
    u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(kTwoPi * u2));
    have_spare_ = true;
    return static_cast<float>(r * std::cos(kTwoPi * u2));
  }

 private:
  std::mt19937_64 rng_;
  bool have_spare_ = false;
  float spare_ = 0;
};

Dataset Generate(int n, const TrainOptions& o, const std::vector<float>& t1,
                 const std::vector<float>& t2, int teacher_hidden,
                 Normals& rng) {
  Dataset d;
  d.x = Tensor(DT_FLOAT, TensorShape({n, o.features}));
  d.labels = Tensor(DT_INT32, TensorShape({n}));
  float* x = d.x.data<float>();
  int32_t* y = d.labels.data<int32_t>();
  std::vector<float> h(teacher_hidden);
  std::vector<float> logits(o.classes);
  for (int i = 0; i < n; ++i) {
    float* row = x + static_cast<int64_t>(i) * o.features;
    for (int j = 0; j < o.features; ++j) row[j] = rng.Next();
    for (int k = 0; k < teacher_hidden; ++k) {
      float s = 0;
      for (int j = 0; j < o.features; ++j)
        s += row[j] * t1[j * teacher_hidden + k];
      h[k] = std::max(s, 0.f);
    }
    int best = 0;
    for (int c = 0; c < o.classes; ++c) {
      float s = 0;
      for (int k = 0; k < teacher_hidden; ++k)
        s += h[k] * t2[k * o.classes + c];
      logits[c] = s;
      if (s > logits[best]) best = c;
    }
    y[i] = best;
  }
  return d;
}

// The classifier graph and the session running it.
struct Model {
  std::unique_ptr<LocalSession> session;
  LocalSession::CallableHandle grad_step = 0;  // x, labels -> loss, grads
  LocalSession::CallableHandle apply = 0;      // mean grads -> (update)
  LocalSession::CallableHandle eval = 0;       // x, labels -> loss, logits
  LocalSession::CallableHandle params = 0;     // -> parameter values
  // The training state an elastic gang hands on: the parameters and the
  // optimizer's accumulators, read and assigned in this order.
  LocalSession::CallableHandle read_state = 0;
  LocalSession::CallableHandle assign_state = 0;
  std::vector<std::string> var_names;
  std::vector<TensorShape> var_shapes;
};

absl::StatusOr<Model> BuildModel(const TrainOptions& o) {
  Scope root = Scope::NewRootScope();
  COHORT_ASSIGN_OR_RETURN(Classifier net, BuildClassifier(root, o));
  Model m;
  m.var_names = net.var_names;
  m.var_shapes = net.var_shapes;
  // The update is fed the gang's mean gradients through placeholders.
  std::vector<Operation> updates;
  std::vector<std::string> grad_fetches, mean_feeds, param_fetches;
  std::vector<std::pair<ops::Variable, TensorShape>> state;
  for (size_t i = 0; i < net.vars.size(); ++i) {
    grad_fetches.push_back(net.grads[i].name());
    param_fetches.push_back(net.vars[i].value.name());
    Scope s = root.NewSubScope("update_" + net.var_names[i]);
    auto mean = ops::Placeholder(s.WithOpName("mean_grad"), DT_FLOAT,
                                 net.var_shapes[i]);
    mean_feeds.push_back(mean.name());
    ops::Variable accumulator;
    updates.push_back(ApplyUpdate(root, s, net, i, mean, o, &accumulator));
    state.emplace_back(net.vars[i], net.var_shapes[i]);
    if (accumulator.handle.node() != nullptr) {
      state.emplace_back(accumulator, net.var_shapes[i]);
    }
  }
  std::vector<std::string> state_fetches, state_feeds;
  std::vector<Operation> assigns;
  for (size_t i = 0; i < state.size(); ++i) {
    Scope s = root.NewSubScope(absl::StrCat("set_state_", i));
    auto value =
        ops::Placeholder(s.WithOpName("value"), DT_FLOAT, state[i].second);
    state_fetches.push_back(state[i].first.value.name());
    state_feeds.push_back(value.name());
    assigns.push_back(ops::AssignVariableOp(s, state[i].first.handle, value));
  }
  ops::NoOp(root.WithOpName("set_state").WithControlDependencies(assigns));
  const Output loss = net.loss, logits = net.logits;
  ops::NoOp(root.WithOpName("train").WithControlDependencies(updates));
  ops::GlobalVariablesInitializer(root);

  GraphDef g;
  COHORT_RETURN_IF_ERROR(root.ToGraphDef(&g));
  SessionOptions so;
  so.num_threads = o.threads;
  COHORT_ASSIGN_OR_RETURN(m.session, LocalSession::Create(g, so));
  COHORT_RETURN_IF_ERROR(m.session->Run({}, {}, {"init"}, nullptr));

  CallableOptions c;
  c.feeds = {"x", "labels"};
  c.fetches = {loss.name()};
  c.fetches.insert(c.fetches.end(), grad_fetches.begin(), grad_fetches.end());
  COHORT_ASSIGN_OR_RETURN(m.grad_step, m.session->MakeCallable(c));
  c.fetches = {loss.name(), logits.name()};
  COHORT_ASSIGN_OR_RETURN(m.eval, m.session->MakeCallable(c));
  c = CallableOptions();
  c.feeds = mean_feeds;
  c.targets = {"train"};
  COHORT_ASSIGN_OR_RETURN(m.apply, m.session->MakeCallable(c));
  c = CallableOptions();
  c.fetches = param_fetches;
  COHORT_ASSIGN_OR_RETURN(m.params, m.session->MakeCallable(c));
  c = CallableOptions();
  c.fetches = state_fetches;
  COHORT_ASSIGN_OR_RETURN(m.read_state, m.session->MakeCallable(c));
  c = CallableOptions();
  c.feeds = state_feeds;
  c.targets = {"set_state"};
  COHORT_ASSIGN_OR_RETURN(m.assign_state, m.session->MakeCallable(c));
  return m;
}

// A collective of the gang failed while `doing`: Unavailable (a member may
// have been lost: an elastic gang re-forms and tries again).
absl::Status MemberLost(const absl::Status& error, const std::string& doing) {
  return absl::UnavailableError(absl::StrCat(doing, ": ", error.message()));
}

// AllGathers this task's parameter checksum; FailedPrecondition naming the
// partitions that disagree with partition 0.
absl::StatusOr<uint32_t> CheckParametersAgree(Model& m, const Collective& gang,
                                              const std::string& when) {
  std::vector<Tensor> params;
  COHORT_RETURN_IF_ERROR(m.session->RunCallable(m.params, {}, &params));
  const uint32_t mine = ParameterChecksum(params);
  absl::StatusOr<std::vector<std::string>> gathered =
      gang.all_gather(absl::StrFormat("%08x", mine));
  if (!gathered.ok()) return MemberLost(gathered.status(), "comparing " + when);
  const std::vector<std::string>& all = *gathered;
  std::string differing;
  for (size_t p = 1; p < all.size(); ++p) {
    if (all[p] != all[0])
      absl::StrAppend(&differing, " partition ", p, "=", all[p]);
  }
  if (!differing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "parameters differ across tasks ", when, ": partition 0 has checksum ",
        all[0], ";", differing, " (this task, partition ", gang.partition_id,
        ", has ", absl::StrFormat("%08x", mine),
        "); every task must build the same graph with the same seeds and "
        "flags"));
  }
  return mine;
}

// The training state an elastic gang hands on besides the variables.
struct Progress {
  int64_t step = 0;  // completed steps
  double initial_loss = 0;
};

// For an elastic gang, after every change of membership: the member with
// the most committed steps (the lowest rank among equals) hands its state
// (progress, parameters and accumulators) to every member, which then
// checks that all agree. A task that has just joined (`has_state` false)
// never hands on its fresh variables. Returns the checksum.
absl::StatusOr<uint32_t> AdoptCommittedState(Model& m, Collective& gang,
                                             bool& has_state,
                                             Progress& progress) {
  absl::StatusOr<std::vector<std::string>> gathered =
      gang.all_gather(absl::StrFormat(
          "%016x", has_state ? static_cast<uint64_t>(progress.step) + 1 : 0));
  if (!gathered.ok()) {
    return MemberLost(gathered.status(), "finding who holds the state");
  }
  const std::vector<std::string>& offers = *gathered;
  int root = -1;
  uint64_t best = 0;
  for (int q = 0; q < static_cast<int>(offers.size()); ++q) {
    uint64_t offer = 0;
    if (!absl::SimpleHexAtoi(offers[q], &offer)) {
      return absl::InternalError(absl::StrCat("partition ", q, " offered \"",
                                              offers[q], "\" as its state"));
    }
    if (offer > best) {
      best = offer;
      root = q;
    }
  }
  if (root < 0) {
    // Only restarted processes are left: every member that held the
    // training state was lost. Starting again from fresh weights would look
    // like success while it threw the training away.
    return absl::FailedPreconditionError(absl::StrCat(
        "every member of elastic ", gang.describe(),
        " joined after training started: the members that held the "
        "training state were all lost, so the job cannot go on from it; "
        "start it again (from its checkpoint, if it saved one)"));
  }
  std::vector<Tensor> state;
  COHORT_RETURN_IF_ERROR(m.session->RunCallable(m.read_state, {}, &state));
  size_t bytes = sizeof(Progress);
  for (const Tensor& t : state) bytes += t.TotalBytes();
  std::string buffer(bytes, '\0');
  std::memcpy(buffer.data(), &progress, sizeof(Progress));
  size_t at = sizeof(Progress);
  for (const Tensor& t : state) {
    std::memcpy(buffer.data() + at, t.raw_data(), t.TotalBytes());
    at += t.TotalBytes();
  }
  if (absl::Status s = gang.broadcast(buffer.data(), buffer.size(), root);
      !s.ok()) {
    return MemberLost(
        s, absl::StrCat("handing partition ", root, "'s state to all"));
  }
  std::memcpy(&progress, buffer.data(), sizeof(Progress));
  std::vector<Tensor> adopted;
  at = sizeof(Progress);
  for (const Tensor& t : state) {
    Tensor copy(t.dtype(), t.shape());
    std::memcpy(copy.raw_data(), buffer.data() + at, t.TotalBytes());
    at += t.TotalBytes();
    adopted.push_back(std::move(copy));
  }
  COHORT_RETURN_IF_ERROR(
      Annotate(m.session->RunCallable(m.assign_state, adopted, nullptr),
               absl::StrCat("assigning partition ", root, "'s state")));
  has_state = true;
  return CheckParametersAgree(m, gang,
                              absl::StrCat("after joining ", gang.describe()));
}

}  // namespace

SyntheticData MakeSyntheticData(const TrainOptions& o) {
  Normals rng(o.data_seed);
  const int teacher_hidden = 16;
  std::vector<float> t1(static_cast<size_t>(o.features) * teacher_hidden);
  std::vector<float> t2(static_cast<size_t>(teacher_hidden) * o.classes);
  for (float& v : t1) v = rng.Next();
  for (float& v : t2) v = rng.Next();
  SyntheticData s;
  s.train = Generate(o.train_examples, o, t1, t2, teacher_hidden, rng);
  s.heldout = Generate(o.heldout_examples, o, t1, t2, teacher_hidden, rng);
  return s;
}

ops::Variable ScaledNormalWeights(const Scope& root, const Scope& init,
                                  const std::string& name, int in, int out,
                                  int64_t seed, int64_t seed2, double gain) {
  return ops::MakeVariable(
      root, name,
      ops::Mul(init,
               ops::RandomNormal(init, Tensor::Vec<int32_t>({in, out}),
                                 DT_FLOAT, seed, seed2),
               static_cast<float>(std::sqrt(gain / in))));
}

Dataset Rows(const Dataset& d, int begin, int count) {
  const int64_t f = d.x.dim_size(1);
  Dataset out;
  out.x = Tensor(DT_FLOAT, TensorShape({count, f}));
  out.labels = Tensor(DT_INT32, TensorShape({count}));
  std::copy_n(d.x.data<float>() + begin * f, count * f, out.x.data<float>());
  std::copy_n(d.labels.data<int32_t>() + begin, count,
              out.labels.data<int32_t>());
  return out;
}

double Accuracy(const Tensor& logits, const Tensor& labels) {
  const int64_t n = logits.dim_size(0);
  const int64_t classes = logits.dim_size(1);
  const float* l = logits.data<float>();
  const int32_t* y = labels.data<int32_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = l + i * classes;
    correct += std::max_element(row, row + classes) - row == y[i];
  }
  return n > 0 ? static_cast<double>(correct) / n : 0;
}

absl::StatusOr<Dataset> Shard(const Dataset& d, int partition, int num_tasks) {
  if (num_tasks <= 0 || partition < 0 || partition >= num_tasks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard: partition ", partition, " is outside [0, ", num_tasks, ")"));
  }
  const int64_t n = d.size();
  const int begin = static_cast<int>(partition * n / num_tasks);
  const int end = static_cast<int>((partition + 1) * n / num_tasks);
  if (end <= begin) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard: partition ", partition, " of ", num_tasks,
        " gets no examples out of ", n, "; use more examples or fewer tasks"));
  }
  return Rows(d, begin, end - begin);
}

uint32_t ParameterChecksum(const std::vector<Tensor>& params) {
  uint32_t crc = 0;
  for (const Tensor& t : params) {
    crc = crc32c::Extend(crc, static_cast<const char*>(t.raw_data()),
                         t.TotalBytes());
  }
  return crc;
}

absl::StatusOr<TrainReport> RunDataParallelTraining(const TrainOptions& o,
                                                    const Collective& gang,
                                                    std::ostream& log) {
  // An elastic gang's membership, and so this task's partition and shard,
  // change while it trains.
  Collective g = gang;
  const SyntheticData data = MakeSyntheticData(o);
  Dataset shard;
  int offset = 0;
  auto take_shard = [&]() -> absl::Status {
    COHORT_ASSIGN_OR_RETURN(shard,
                            Shard(data.train, g.partition_id, g.num_tasks));
    offset = 0;
    if (o.batch <= 0 || o.batch > shard.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--batch ", o.batch, " must be in [1, ", shard.size(),
          "] (the examples of partition ", g.partition_id, "'s shard)"));
    }
    return absl::OkStatus();
  };
  COHORT_RETURN_IF_ERROR(take_shard());
  COHORT_ASSIGN_OR_RETURN(Model m, BuildModel(o));
  TrainReport report;
  int step = 0;  // completed steps
  bool has_state = !g.joins_running_job;
  Progress progress;
  // An elastic member's progress goes with its state to the others.
  auto adopt = [&]() -> absl::StatusOr<uint32_t> {
    progress.step = step;
    progress.initial_loss = report.initial_loss;
    COHORT_ASSIGN_OR_RETURN(uint32_t checksum,
                            AdoptCommittedState(m, g, has_state, progress));
    step = static_cast<int>(progress.step);
    report.initial_loss = progress.initial_loss;
    return checksum;
  };
  if (g.elastic() && g.job_finished()) {
    report.arrived_after_the_end = true;
    return report;
  }
  if (g.elastic()) {
    // A task that joins a running job takes the members' state and step.
    COHORT_RETURN_IF_ERROR(adopt().status());
  } else {
    COHORT_RETURN_IF_ERROR(
        CheckParametersAgree(m, g, "after initialisation").status());
  }
  if (g.partition_id == 0 && !g.joins_running_job) {
    log << "training: " << g.num_tasks << " tasks, " << data.train.size()
        << " training examples (" << shard.size() << " per shard), batch "
        << o.batch << " per task (" << o.batch * g.num_tasks
        << " global), hidden " << o.hidden << ", lr " << o.learning_rate
        << ", momentum " << o.momentum << ", " << o.steps << " steps"
        << (g.elastic() ? absl::StrCat(", elastic ", g.describe()) : "")
        << std::endl;
  }

  Env* env = Env::Default();
  const absl::Time start = env->Now();
  absl::Time window_start = start;
  double window_examples = 0, examples = 0;
  // After a failed collective (`cause`) or an agreed change (OK): the next
  // membership, partition 0's committed state, a new shard.
  auto change_membership = [&](absl::Status cause) -> absl::Status {
    absl::StatusOr<uint32_t> checksum;
    for (;;) {
      COHORT_RETURN_IF_ERROR(g.reform(cause, g));
      if (g.job_finished()) {
        return absl::AbortedError(absl::StrCat(
            "the elastic job was marked finished while this task re-formed "
            "its group at step ",
            step, " (after: ", cause.message(),
            "); the members finish together, so check the other members' "
            "logs for what happened"));
      }
      checksum = adopt();
      // A member lost while the state was handed on: re-form again.
      if (!absl::IsUnavailable(checksum.status())) break;
      cause = checksum.status();
    }
    COHORT_RETURN_IF_ERROR(checksum.status());
    COHORT_RETURN_IF_ERROR(take_shard());
    ++report.membership_changes;
    if (g.partition_id == 0) {
      log << "elastic " << g.describe() << ": " << g.num_tasks
          << " task(s) go on from step " << step
          << (cause.ok() ? std::string(" (a task joined)")
                         : absl::StrCat(" (after: ", cause.message(), ")"))
          << absl::StrFormat("; parameters identical on all (crc32c %08x)",
                             *checksum)
          << std::endl;
    }
    return absl::OkStatus();
  };
  std::vector<Tensor> out;
  // An elastic gang that loses a member during the final comparison re-forms
  // and, if the state it takes is short of the last step, trains on.
  for (;;) {
    while (step < o.steps) {
      const int this_step = step + 1;
      if (offset + o.batch > shard.size()) offset = 0;
      Dataset batch = Rows(shard, offset, o.batch);
      offset += o.batch;
      COHORT_RETURN_IF_ERROR(Annotate(
          m.session->RunCallable(m.grad_step, {batch.x, batch.labels}, &out),
          absl::StrCat("step ", this_step, ": forward and gradients")));
      // The fetched tensors (the loss, then one gradient per variable) are
      // averaged in place: no copies. Every task gets the same bits back, so
      // the updates stay identical. A fetch may share its buffer (a kernel
      // may return its input's: an Identity, a reduction over no axis): one
      // that shares anything is copied first, so that each buffer is
      // averaged once and nothing outside the fetches changes. (The copy
      // leaves the old buffer to the later fetches that shared it.)
      absl::Status reduced;
      for (size_t i = 0; i < out.size() && reduced.ok(); ++i) {
        const std::string what =
            i == 0 ? std::string("the loss")
                   : absl::StrCat("the gradient of ", m.var_names[i - 1]);
        if (out[i].dtype() != DT_FLOAT) {
          return absl::InternalError(
              absl::StrCat("step ", this_step, ": ", what, " is ",
                           DataTypeName(out[i].dtype()), ", not float"));
        }
        if (!out[i].RefCountIsOne()) out[i] = out[i].DeepCopy();
        reduced = Annotate(
            g.all_reduce_mean(out[i].data<float>(),
                              static_cast<size_t>(out[i].NumElements())),
            absl::StrCat("step ", this_step, ": averaging ", what));
      }
      if (!reduced.ok()) {
        // An elastic gang drops the step: nothing of it was applied.
        if (!g.elastic()) return reduced;
        COHORT_RETURN_IF_ERROR(change_membership(reduced));
        continue;
      }
      const double loss = out[0].scalar<float>();
      if (this_step == 1) report.initial_loss = loss;
      report.final_train_loss = loss;
      const std::vector<Tensor> mean(out.begin() + 1, out.end());
      // The commit point: the update of a step whose gradients every member
      // averaged.
      COHORT_RETURN_IF_ERROR(
          Annotate(m.session->RunCallable(m.apply, mean, nullptr),
                   absl::StrCat("step ", this_step, ": applying the update")));
      step = this_step;
      window_examples += static_cast<double>(o.batch) * g.num_tasks;
      examples += static_cast<double>(o.batch) * g.num_tasks;
      if (g.partition_id == 0 && o.log_every > 0 &&
          (step % o.log_every == 0 || step == o.steps)) {
        const double secs = absl::ToDoubleSeconds(env->Now() - window_start);
        log << absl::StrFormat("step %d/%d loss %.4f examples/s %.0f", step,
                               o.steps, loss,
                               secs > 0 ? window_examples / secs : 0)
            << std::endl;
        window_start = env->Now();
        window_examples = 0;
      }
      if (g.elastic() && step < o.steps) {
        absl::StatusOr<bool> changed = g.membership_changed();
        if (!changed.ok()) {
          COHORT_RETURN_IF_ERROR(change_membership(changed.status()));
        } else if (*changed) {
          COHORT_RETURN_IF_ERROR(change_membership(absl::OkStatus()));
        }
      }
    }
    absl::StatusOr<uint32_t> checksum =
        CheckParametersAgree(m, g, absl::StrCat("after step ", o.steps));
    if (checksum.ok()) {
      report.checksum = *checksum;
      break;
    }
    if (!g.elastic() || !absl::IsUnavailable(checksum.status())) {
      return checksum.status();
    }
    COHORT_RETURN_IF_ERROR(change_membership(checksum.status()));
  }
  const double secs = absl::ToDoubleSeconds(env->Now() - start);
  if (secs > 0) {
    report.steps_per_second = o.steps / secs;
    report.examples_per_second = examples / secs;
  }
  report.partition_id = g.partition_id;
  report.num_tasks = g.num_tasks;
  if (g.elastic() && g.partition_id == 0) {
    // Once every member compared the final parameters: a replacement still
    // on its way learns that there is nothing to join.
    COHORT_RETURN_IF_ERROR(
        Annotate(g.mark_finished(), "marking the elastic job finished"));
  }

  // Held-out evaluation (every task: the parameters are identical).
  COHORT_RETURN_IF_ERROR(
      Annotate(m.session->RunCallable(
                   m.eval, {data.heldout.x, data.heldout.labels}, &out),
               "held-out evaluation"));
  report.heldout_loss = out[0].scalar<float>();
  report.heldout_accuracy = Accuracy(out[1], data.heldout.labels);

  if (g.partition_id == 0 && !o.checkpoint_dir.empty()) {
    COHORT_RETURN_IF_ERROR(
        CreateCheckpointDirectory(o.checkpoint_dir, "--checkpoint-dir"));
    Saver saver(m.session->device()->resource_manager());
    COHORT_ASSIGN_OR_RETURN(report.checkpoint_path,
                            saver.Save(o.checkpoint_dir, o.steps));
  }
  return report;
}

absl::StatusOr<Classifier> BuildClassifier(const Scope& root,
                                           const TrainOptions& o) {
  Classifier c;
  c.x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {-1, o.features});
  c.labels = ops::Placeholder(root.WithOpName("labels"), DT_INT32, {-1});
  Scope init = root.NewSubScope("init_values");
  auto w1 = ScaledNormalWeights(root, init, "w1", o.features, o.hidden,
                                o.weight_seed, 1, 2.0);
  auto b1 = ops::MakeVariable(
      root, "b1", Tensor::Filled<float>(TensorShape({o.hidden}), 0.f));
  auto w2 = ScaledNormalWeights(root, init, "w2", o.hidden, o.classes,
                                o.weight_seed, 2, 1.0);
  auto b2 = ops::MakeVariable(
      root, "b2", Tensor::Filled<float>(TensorShape({o.classes}), 0.f));
  auto h = ops::Relu(
      root, ops::Add(root, ops::MatMul(root, c.x, w1.value), b1.value));
  c.logits = ops::Add(root.WithOpName("logits"), ops::MatMul(root, h, w2.value),
                      b2.value);
  auto xent =
      ops::SparseSoftmaxCrossEntropyWithLogits(root, c.logits, c.labels);
  c.loss = ops::Mean(root.WithOpName("loss"), xent.loss, 0);
  c.vars = {w1, b1, w2, b2};
  c.var_names = {"w1", "b1", "w2", "b2"};
  c.var_shapes = {TensorShape({o.features, o.hidden}), TensorShape({o.hidden}),
                  TensorShape({o.hidden, o.classes}), TensorShape({o.classes})};
  std::vector<Output> values;
  for (const auto& v : c.vars) values.push_back(v.value);
  COHORT_RETURN_IF_ERROR(
      AddSymbolicGradients(root, {c.loss}, values, &c.grads));
  COHORT_RETURN_IF_ERROR(root.status());
  return c;
}

Operation ApplyUpdate(const Scope& root, const Scope& scope,
                      const Classifier& c, size_t i, Input grad,
                      const TrainOptions& o, ops::Variable* accumulator) {
  if (o.momentum > 0) {
    auto accum = ops::MakeVariable(root, c.var_names[i] + "_momentum",
                                   Tensor::Filled<float>(c.var_shapes[i], 0.f));
    if (accumulator != nullptr) *accumulator = accum;
    return ops::ApplyMomentum(scope, c.vars[i].handle, accum.handle,
                              o.learning_rate, grad, o.momentum);
  }
  return ops::ApplyGradientDescent(scope, c.vars[i].handle, o.learning_rate,
                                   grad);
}

}  // namespace cohort::training
