// Image resizing with the Lanczos (a = 3) filter, computed as PIL's Image.resize(..., LANCZOS) computes it on
// 8-bit images, so that the result is the same bytes: per-axis filters widened by the downscale factor, weights
// normalised then rounded to 22-bit fixed point, one pass per axis, each rounding and clamping to 8 bits, in
// Pillow 13's order. Written for cellm and checked against Pillow's output on hundreds of sizes.
#pragma once

#include "vision/image.h"

namespace cellm::vision {

// `in` resized to width x height (both >= 1). The same size returns a copy, as PIL does.
Image resize_lanczos(const Image& in, int width, int height);

}  // namespace cellm::vision
