
const data = JSON.parse(document.getElementById('step-data').textContent);
const details = document.getElementById('step-details'), list = document.getElementById('step-list');
const nodes = [...document.querySelectorAll('#lineage .node')];
function showStep(i) {
  const d = data.steps[i], lines = [];
  lines.push((d.operation || d.type || '?') + '  ' + d.fingerprint);
  if (d.parents && d.parents.length) lines.push('parents: ' + d.parents.join(', '));
  if (d.function) lines.push('function: ' + (d.function.qualname || '?') + ' @ ' +
                             (d.function.file || '?') + ':' + (d.function.line || '?'));
  if (d.call_site) lines.push('called at: ' + (d.call_site.file || '?') + ':' + (d.call_site.line || '?'));
  const args = Object.entries(d.args || {});
  lines.push('arguments:' + (args.length ? '' : ' (none recorded)'));
  for (const [k, v] of args) lines.push('  ' + k + ' = ' + v);
  lines.push('runs: ' + d.runs + ', hits: ' + d.hits + ', misses: ' + d.misses +
             (d.cache ? ' (last: ' + d.cache + ')' : ''));
  const files = d.files || [];
  lines.push('files:' + (files.length ? '' : (d.in_memory ? ' none (in memory)' : ' none')));
  for (const f of files) lines.push('  ' + f.path + (f.exists ? '  ' + f.size + ' bytes' : '  (gone)'));
  if (d.deleted) lines.push(d.deleted);
  details.textContent = lines.join('\n');
  for (const b of list.children) b.classList.toggle('on', +b.dataset.i === i);
}
function showBox(g, step) {
  nodes.forEach(n => n.classList.toggle('on', +n.dataset.g === g));
  const members = data.groups[g];
  list.replaceChildren(...(members.length > 1 ? members.map(i => {
    const b = document.createElement('button');
    const d = data.steps[i];
    b.textContent = (d.operation || d.type) + ' ' + d.fingerprint.slice(0, 8);
    b.dataset.i = i;
    b.onclick = () => showStep(i);
    return b;
  }) : []));
  showStep(step === undefined ? members[0] : step);
}
function matches(i, q) {
  const d = data.steps[i];
  const texts = [d.fingerprint, d.operation, d.function && d.function.qualname];
  return texts.some(t => t && t.toLowerCase().includes(q));
}
const search = document.getElementById('search'), count = document.getElementById('search-count');
search.addEventListener('input', () => {
  const q = search.value.trim().toLowerCase();
  let n = 0;
  for (const el of nodes) {
    const hit = q !== '' && data.groups[el.dataset.g].some(i => matches(i, q));
    el.classList.toggle('hit', hit);
    el.classList.toggle('dim', q !== '' && !hit);
    n += hit;
  }
  count.textContent = q ? n + ' box(es) match' : '';
});
search.addEventListener('keydown', ev => {
  const q = search.value.trim().toLowerCase(), el = nodes.find(n => n.classList.contains('hit'));
  if (ev.key !== 'Enter' || !el) return;
  el.scrollIntoView({block: 'center', inline: 'center'});
  showBox(+el.dataset.g, data.groups[el.dataset.g].find(i => matches(i, q)));
});
for (const el of nodes) {
  el.addEventListener('click', () => showBox(+el.dataset.g));
  el.addEventListener('keydown', ev => { if (ev.key === 'Enter') showBox(+el.dataset.g); });
}
