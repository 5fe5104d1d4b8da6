#include "forward.hpp"

#include "archs/llama/forward.hpp"

namespace cellm::idefics3 {

void build_forward(const Model& model, const cellm_batch_shape& shape, transformer::GraphBuilder& g) {
    const transformer::GraphBuilder::StepInputs in = g.step_inputs(shape);
    int32_t x = g.get_rows(g.weight(model.token_embd), in.tokens, "inp_embd");
    x = g.splice_embeddings(x, shape);  // the image tokens' rows become their image's embeddings
    llama::build_decoder(model, shape, in, x, g);
}

}  // namespace cellm::idefics3
