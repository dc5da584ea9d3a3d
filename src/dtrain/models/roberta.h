// RoBERTa's names: how a parameter of make_roberta's model is called in Hugging Face
// checkpoints (see roberta.cpp for the architecture and its blocks).
#pragma once

#include <string>
#include <vector>

namespace dtrain::models {

// Checkpoint names of the parameter `name` ("layer3.attention.self.query.weight"), most
// likely first: RobertaForSequenceClassification's ("roberta.encoder.layer.3. ..."), then a
// bare RobertaModel's ("encoder.layer.3. ...").
std::vector<std::string> roberta_weight_names(const std::string& name);

}  // namespace dtrain::models
