// cellm-host tokenize: the ids (and pieces) of a text. Needs only the tokenizer metadata of a model file.
#include "commands.h"

#include "model/model_file.h"
#include "plugin/plugin_registry.h"
#include "tokenize/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

namespace cellm::cli {

Command add_tokenize(CLI::App& app) {
    struct Options {
        std::string model, text;
        bool add_bos = false, parse_special = false, json = false;
    };
    auto o = std::make_shared<Options>();
    app.add_option("--model", o->model, "Model file (a tokenizer-only GGUF is enough)")->required();
    app.add_option("--text", o->text, "Text to tokenize")->required();
    app.add_flag("--add-bos", o->add_bos, "Prepend the BOS token");
    app.add_flag("--parse-special", o->parse_special, "Turn special-token text such as <|im_start|> into its token");
    app.add_flag("--json", o->json, "Print one JSON object {\"ids\": [...], \"pieces\": [...]}");
    return [o]() {
        PluginRegistry registry;
        registry.discover();
        auto file = ModelFile::open(registry, o->model);
        auto tokenizer = Tokenizer::from_model(file->view());
        const std::vector<int32_t> ids = tokenizer->encode(o->text, o->add_bos, o->parse_special);
        if (o->json) {
            // Pieces are the bytes each token stands for; a piece that is part of a UTF-8 character shows as U+FFFD.
            nlohmann::json out{{"ids", ids}, {"pieces", nlohmann::json::array()}};
            for (int32_t id : ids) out["pieces"].push_back(tokenizer->token_bytes(id));
            std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
            return 0;
        }
        for (int32_t id : ids) {
            std::printf("%6d  %s\n", id, nlohmann::json(tokenizer->token_bytes(id)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        }
        std::printf("%zu tokens\n", ids.size());
        return 0;
    };
}

}  // namespace cellm::cli
