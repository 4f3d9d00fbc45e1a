// Overloaded: several lambdas as one visitor, for std::visit over a variant.
#pragma once

namespace delayd {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace delayd
