// Neural-network ops: activations, softmax and the softmax cross-entropy
// losses.
//
// Op semantics (TensorFlow's; T in {float, double}):
//  - Relu(features) = max(features, 0); Sigmoid(x) = 1 / (1 + exp(-x));
//    Tanh(x).
//  - ReluGrad(gradients, features) = gradients where features > 0, else 0
//    (features: Relu's input or output); InvalidArgument when the shapes
//    differ. Relu's registered gradient.
//  - Float Relu, ReluGrad run vectorised loops (vector_loops.h).
//  - Softmax(logits): along the last axis (rank >= 1), computed stably
//    (the row maximum is subtracted first).
//  - SoftmaxCrossEntropyWithLogits(features [batch, classes], labels [batch,
//    classes]) -> (loss [batch], backprop [batch, classes]):
//    loss = -sum(labels * log_softmax(features)), backprop = softmax -
//    labels. InvalidArgument when the shapes differ or are not rank 2.
//  - SparseSoftmaxCrossEntropyWithLogits(features [batch, classes], labels
//    [batch] of Tlabels in {int32, int64}) -> (loss, backprop): as above with
//    one-hot labels; InvalidArgument "label 7 at position 1 is outside the
//    valid range [0, 3)" for a bad label.
//
// Thread safety: kernels are stateless; wrappers build into a Scope.
#ifndef COHORT_GRAPH_KERNELS_NN_OPS_H_
#define COHORT_GRAPH_KERNELS_NN_OPS_H_

#include "absl/status/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

absl::Status RegisterNnOps(OpRegistry* registry);
absl::Status RegisterNnKernels(KernelRegistry* registry);

namespace ops {

Output Relu(const Scope& scope, Input features);
Output ReluGrad(const Scope& scope, Input gradients, Input features);
Output Sigmoid(const Scope& scope, Input x);
Output Tanh(const Scope& scope, Input x);
Output Softmax(const Scope& scope, Input logits);

struct CrossEntropyOutputs {
  Output loss;      // [batch]
  Output backprop;  // [batch, classes]
};
CrossEntropyOutputs SoftmaxCrossEntropyWithLogits(const Scope& scope,
                                                  Input features, Input labels);
CrossEntropyOutputs SparseSoftmaxCrossEntropyWithLogits(const Scope& scope,
                                                        Input features,
                                                        Input labels);

}  // namespace ops
}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_NN_OPS_H_
