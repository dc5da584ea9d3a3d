// `dtrain models`: the zoo with block names, parameter counts and output shapes.
#include <iostream>
#include <memory>

#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/models/registry.h"

namespace dtrain::cli {

void register_models(CLI::App& parent, int& exit_code) {
  struct Options {
    std::string model;
    std::string input_shape;  // empty: each model's default
    int64_t max_seq_len = 128;
    models::TransformerConfig transformer;
    int64_t num_classes = 10;
    double width = 1.0;
    int64_t depth = 2;
    Output output;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = parent.add_subcommand(
      "models",
      "list the model zoo: blocks (the cut points of a pipeline), parameters, output shapes");
  sub->add_option("--model", o->model, "one model (default: all)");
  sub->add_option("--input-shape", o->input_shape,
                  "C,H,W of one sample (default: each image model's own, 1,28,28)");
  sub->add_option("--num-classes", o->num_classes, "classes")->capture_default_str();
  sub->add_option("--width", o->width, "width multiplier")->capture_default_str();
  sub->add_option("--depth", o->depth, "mlp: hidden layers")->capture_default_str();
  sub->add_option("--max-seq-len", o->max_seq_len, "roberta: tokens per sample")
      ->capture_default_str();
  add_transformer_flags(sub, o->transformer);
  add_output_flags(sub, o->output, "", false);
  sub->callback([o, &exit_code] {
    std::vector<int64_t> shape;
    for (int v : parse_int_list(o->input_shape, "--input-shape"))
      shape.push_back(v);
    if (!o->input_shape.empty() && shape.size() != 3)
      throw std::invalid_argument("--input-shape takes C,H,W");
    const auto format = o->output.format;
    std::vector<metrics::Row> rows;
    for (const models::ModelFamily* family : models::model_families()) {
      const std::string& name = family->name;
      if (!o->model.empty() && name != o->model) continue;
      models::ModelConfig mc;
      mc.name = name;
      mc.input_shape = shape.empty() ? family->default_input : shape;
      if (family->input == models::ModelInput::kTokens) mc.input_shape = {o->max_seq_len};
      mc.in_channels = mc.input_shape[0];
      mc.num_classes = o->num_classes;
      mc.width = o->width;
      mc.depth = o->depth;
      mc.transformer = o->transformer;
      auto model = models::make_model(mc);
      for (const auto& b : models::describe(model, models::sample_input(mc, 1))) {
        metrics::Row r;
        r["model"] = name;
        r["block"] = b.name;
        r["parameters"] = b.parameters;
        r["output_shape"] = metrics::shape_string(b.output_shape);
        rows.push_back(r);
      }
      metrics::Row total;
      total["model"] = name;
      total["block"] = "(total)";
      total["parameters"] = models::parameter_count(*model);
      total["output_shape"] = family->help;
      rows.push_back(total);
    }
    if (rows.empty()) throw std::invalid_argument("unknown model '" + o->model + "'");
    metrics::write_rows(std::cout, format,
                        {{"model", "model"},
                         {"block", "block"},
                         {"parameters", "parameters"},
                         {"output_shape", "output (per sample)"}},
                        rows);
    exit_code = 0;
  });
}

}  // namespace dtrain::cli
