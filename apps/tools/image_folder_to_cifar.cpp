// kiln-image-folder-to-cifar ROOT OUTDIR: a command line over
// kiln::data::convert_image_folder_to_cifar (data/image_folder_to_cifar.h);
// ROOT is a folder or ARCHIVE/FOLDER-INSIDE (Note [Archive paths]).
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>

#include "data/image_folder_to_cifar.h"
#include "tensor/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Converts ROOT/train/<class>/<image> and ROOT/test/<class>/<image> (32x32 RGB .png, .jpg, .jpeg or .bmp; "
      "classes sorted by name, at most 10) into the CIFAR-10 binary format: "
      "OUTDIR/cifar-10-batches-bin/data_batch_1..5.bin, test_batch.bin and batches.meta.txt. "
      "ROOT may lie inside a .tar or .tar.gz archive, read without extracting it: "
      "ROOT = ARCHIVE/FOLDER-INSIDE, e.g. cifar10-jpeg.tar.gz/cifar10-jpeg."};
  std::string root, outdir;
  app.add_option("ROOT", root, "image folder holding train/ and test/, or ARCHIVE/FOLDER-INSIDE")->required();
  app.add_option("OUTDIR", outdir, "output folder; cifar-10-batches-bin/ is created inside it")->required();
  CLI11_PARSE(app, argc, argv);

  try {
    kiln::data::CifarConversion c = kiln::data::convert_image_folder_to_cifar(root, outdir);
    std::cout << "wrote " << c.train_images << " training and " << c.test_images << " test images of "
              << c.class_names.size() << " classes to " << c.folder << "\n";
  } catch (const kiln::Error& e) {
    std::cerr << "kiln-image-folder-to-cifar: " << e.message() << "\n";
    return 1;
  }
  return 0;
}
