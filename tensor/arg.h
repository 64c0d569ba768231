// KILN_ARG: one field of an options class, with a chained setter and a
// getter of the same name, as LibTorch's TORCH_ARG.
//
//   class LinearOptions {
//    public:
//     LinearOptions(int64_t in_features, int64_t out_features)
//         : in_features_(in_features), out_features_(out_features) {}
//     KILN_ARG(int64_t, in_features);
//     KILN_ARG(int64_t, out_features);
//     KILN_ARG(bool, bias) = true;
//   };
//   nn::Linear fc(nn::LinearOptions(400, 120).bias(false));
//   fc.options.bias();   // false
//
// Note [Option builders]
// Kiln's settings structs began as aggregates set with designated
// initializers (SGDOptions{.lr = 0.1, .momentum = 0.9}). Two things about
// them trip users: the fields must be named in declaration order
// ({.momentum = 0.9, .lr = 0.1} does not compile), and a field left out
// takes its default silently, even one that has no sensible default (an SGD
// whose lr was forgotten trains at 1e-3). The classes a LibTorch user builds
// therefore take LibTorch's form: what must be given is a constructor
// argument (SGDOptions(lr), Conv2dOptions(in, out, kernel_size)), and every
// other field is a setter that returns the options, so that setters chain
// in any order: SGDOptions(0.1).weight_decay(5e-4).momentum(0.9). The
// getter of the same name reads the field (options.momentum()).
//
// KILN_ARG(T, name) declares, at the point of use:
//   public:  auto& name(T const& value);   // sets the field, returns *this
//            T const& name() const;        // reads it
//   private: T name_                        // "= default;" may follow
// and leaves the class's access at private: list the fields after the
// constructors and other public members, or write public: again. (T
// const&, not const T&, so that KILN_ARG(Generator*, generator) takes a
// pointer to a generator the caller may change.) The member is name_, which
// the class's own functions (validate(), the optimizers' fields() lists of
// member pointers, Note [Hyperparameters by name] in optim/optimizer.h)
// reach directly.
//
// Settings that only the tensor layer's kernels see stay aggregates with
// designated initializers (MaxPool2dOptions of tensor/pool.h, what
// F::max_pool2d takes; Conv2dParams of tensor/conv.h, what nn::Conv2d holds
// and F::conv2d takes); a layer's builder converts to them, once, when the
// layer is built.
#pragma once

#define KILN_ARG(T, name)                                  \
 public:                                                   \
  auto& name(T const& new_##name) {                        \
    this->name##_ = new_##name;                            \
    return *this;                                          \
  }                                                        \
  T const& name() const noexcept { return this->name##_; } \
                                                           \
 private:                                                  \
  T name##_ /* NOLINT: "= default" follows */
