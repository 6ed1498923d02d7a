// A helper thread of the threaded page (main.js starts one per core beyond the page's own): the
// page's wasm on the page's memory, taking tasks of its CPU products until the page closes.
onmessage = async ({ data: { pkg, module, memory } }) => {
  const wasm = await import(pkg);
  await wasm.default({ module_or_path: module, memory });
  postMessage('ready');
  wasm.serveProducts();
};
