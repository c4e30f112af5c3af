/* The run page, live: step states and progress from the SSE "status" events, per-second IOPS and latency
   charts (SVG) from the "sample" events, and the report once the "end" event says the run is over.
   No inline script anywhere (CSP script-src 'self'): this file reads the page's data- attributes. */
(function () {
  'use strict';
  var main = document.getElementById('run');
  if (!main || main.dataset.live !== 'on' || !window.EventSource) return;
  var NS = 'http://www.w3.org/2000/svg';
  var MAX_POINTS = 900;                      // 15 minutes of seconds per series
  var series = { iops: [], mean: [], p99: [] };
  var labels = {};                           // attempt -> its step's label (a fragment's name in the charts)
  var commands = document.getElementById('commands');
  var forms = document.getElementById('command-forms');
  var charts = { iops: document.getElementById('chart-iops'), lat: document.getElementById('chart-lat') };

  function node(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(e);
    return e;
  }

  function fmt(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + 'M';
    if (v >= 1e4) return (v / 1e3).toFixed(0) + 'k';
    if (v >= 1e3) return (v / 1e3).toFixed(1) + 'k';
    return v >= 10 || v === 0 ? v.toFixed(0) : v.toFixed(1);
  }

  function draw(svg, lines) {
    var box = svg.getBoundingClientRect();
    var W = Math.max(box.width, 120), H = Math.max(box.height, 80);
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var all = [];
    lines.forEach(function (l) { all = all.concat(l.pts); });
    svg.dataset.points = String(all.length);
    if (!all.length) return;
    var L = 44, R = 8, T = 8, B = 18;
    var t0 = Infinity, t1 = -Infinity, vmax = 0;
    all.forEach(function (p) { t0 = Math.min(t0, p.t); t1 = Math.max(t1, p.t); vmax = Math.max(vmax, p.v); });
    vmax = vmax > 0 ? vmax * 1.1 : 1;
    var x = function (t) { return L + (t1 > t0 ? (t - t0) / (t1 - t0) : 0.5) * (W - L - R); };
    var y = function (v) { return H - B - (v / vmax) * (H - T - B); };
    [0, 0.5, 1].forEach(function (f) {
      node('line', { x1: L, x2: W - R, y1: y(f * vmax), y2: y(f * vmax), 'class': f ? 'grid-line' : 'axis' }, svg);
      node('text', { x: L - 4, y: y(f * vmax) + 4, 'text-anchor': 'end', 'class': 'tick' }, svg)
        .textContent = fmt(f * vmax);
    });
    node('text', { x: L, y: H - 4, 'class': 'tick' }, svg).textContent = '0 s';
    node('text', { x: W - R, y: H - 4, 'text-anchor': 'end', 'class': 'tick' }, svg)
      .textContent = (t1 - t0).toFixed(0) + ' s';
    // each step's fragment is a group named by its step (its <title>), a separator where it starts and, room
    // permitting, the step's label written above it
    var groups = {}, order = [];
    function group(seg) {
      if (!groups[seg]) {
        var g = node('g', { 'class': 'seg', 'data-label': labels[seg] || seg }, svg);
        node('title', {}, g).textContent = labels[seg] || seg;
        groups[seg] = { g: g, t0: Infinity };
        order.push(seg);
      }
      return groups[seg];
    }
    lines.forEach(function (l) {
      var segs = {};
      l.pts.forEach(function (p) {
        (segs[p.seg] = segs[p.seg] || []).push(x(p.t).toFixed(1) + ',' + y(p.v).toFixed(1));
        var gr = group(p.seg);
        gr.t0 = Math.min(gr.t0, p.t);
      });
      Object.keys(segs).forEach(function (k) {
        var pts = segs[k].length === 1 ? [segs[k][0], segs[k][0]] : segs[k];
        node('polyline', { points: pts.join(' '), 'class': 'line ' + l.cls }, group(k).g);
      });
    });
    var lastLabel = -Infinity;
    order.sort(function (a, b) { return groups[a].t0 - groups[b].t0; }).forEach(function (seg, i) {
      var gr = groups[seg], x0 = x(gr.t0);
      if (i > 0) node('line', { x1: x0, x2: x0, y1: T, y2: H - B, 'class': 'seg-sep' }, gr.g);
      if (x0 - lastLabel >= 90 || i === 0) {     // room for it: written at its start (or ending there, right)
        var right = x0 > L + 0.6 * (W - L - R);
        node('text', { x: right ? x0 - 3 : x0 + 3, y: T + 10, 'text-anchor': right ? 'end' : 'start',
                       'class': 'seg-label' }, gr.g).textContent = labels[seg] || seg;
        lastLabel = x0;
      }
    });
  }

  function redraw() {
    draw(charts.iops, [{ cls: 'iops', pts: series.iops }]);
    draw(charts.lat, [{ cls: 'mean', pts: series.mean }, { cls: 'p99', pts: series.p99 }]);
  }

  function setState(holder, state) {
    if (!holder) return;
    var span = document.createElement('span');
    span.className = 'state s-' + String(state).toLowerCase();
    span.textContent = state;
    holder.replaceChildren(span);
  }

  function text(id, value) {
    var e = document.getElementById(id);
    if (e) e.textContent = value;
    return e;
  }

  function onStatus(d) {
    setState(document.getElementById('run-state'), d.state);
    text('run-done', d.done);
    text('run-total', d.total);
    var why = text('run-reason', d.reason || '');
    if (why) why.hidden = !d.reason;
    if (d.eta !== undefined) eta(d.eta);
    if (d.preconditioning) verdicts(d.preconditioning);
    if (d.actions) setActions(d.actions);
    var rows = {};
    document.querySelectorAll('#steps tr[data-step]').forEach(function (tr) { rows[tr.dataset.step] = tr; });
    var added = false;
    d.steps.forEach(function (st) {
      var tr = rows[st.id];
      if (!tr) {
        tr = rows[st.id] = newRow(st);
        added = true;
      }
      if (tr.dataset.state !== st.state) {
        tr.dataset.state = st.state;
        setState(tr.querySelector('.st'), st.state);
      }
      var fill = tr.querySelector('.bar > span');
      if (fill) fill.style.width = (100 * st.progress).toFixed(1) + '%';
      var attempts = tr.querySelector('.attempts');
      if (attempts && st.attempt !== null && Number(attempts.textContent) < st.attempt) attempts.textContent = st.attempt;
      var reason = tr.querySelector('.reason');
      if (reason) reason.textContent = st.reason || '';
    });
    if (added) {
      document.querySelectorAll('#steps tr[data-step]').forEach(function (tr, i) {
        tr.querySelector('td').textContent = String(i + 1);
      });
    }
  }

  function cell(tr, cls, value) {
    var td = document.createElement('td');
    if (cls) td.className = cls;
    if (value !== undefined) td.textContent = value;
    tr.appendChild(td);
    return td;
  }

  // a step planned while the page is open (a precondition round after the last): its row, at its place
  function newRow(st) {
    var body = document.querySelector('#steps tbody');
    var tr = document.createElement('tr');
    tr.dataset.step = st.id;
    cell(tr, 'num', '');
    cell(tr, '', st.name);
    cell(tr, '', st.kind + (st.round ? ' r' + st.round : ''));
    cell(tr, 'st');
    var bar = document.createElement('span');
    bar.className = 'bar';
    var fill = document.createElement('span');
    fill.className = 'fill';
    fill.style.width = '0%';
    bar.appendChild(fill);
    cell(tr, '').appendChild(bar);
    cell(tr, 'num attempts', '0');
    cell(tr, 'why reason', '');
    var rows = body.querySelectorAll('tr[data-step]');
    var at = typeof st.index === 'number' ? st.index : rows.length;
    body.insertBefore(tr, at < rows.length ? rows[at] : null);
    return tr;
  }

  function eta(e) {
    var dd = document.getElementById('run-eta');
    if (!dd) return;
    document.querySelectorAll('.eta').forEach(function (el) { el.hidden = !e; });
    dd.textContent = e ? e.text : '';
  }

  // each precondition group: the line labctl run show prints, and the round running (k of at most N)
  function verdicts(groups) {
    var list = document.getElementById('verdicts');
    if (!list || !groups.length) return;
    document.getElementById('steady').hidden = false;
    groups.forEach(function (g) {
      var li = list.querySelector('li[data-pc="' + g.seq + '"]');
      if (!li) {
        li = document.createElement('li');
        li.dataset.pc = String(g.seq);
        var line = document.createElement('span');
        line.className = 'pc-line';
        var now = document.createElement('span');
        now.className = 'pc-now muted';
        li.append(line, ' ', now);
        list.appendChild(li);
      }
      li.dataset.state = g.state;
      li.querySelector('.pc-line').textContent = g.line || ('precondition ' + g.name + ': running, 0 round(s)');
      li.querySelector('.pc-now').textContent = g.running ? 'round ' + g.running +
        (g.max_rounds ? ' of at most ' + g.max_rounds : '') + ' running' : '';
    });
  }

  // the commands the run's state allows, without a reload: the forms the page keeps in its <template>
  function setActions(allowed) {
    if (!commands || !forms) return;
    ['cancel', 'pause', 'resume', 'rerun'].forEach(function (action) {
      var shown = commands.querySelector('form[data-action="' + action + '"]');
      var want = allowed.indexOf(action) >= 0;
      if (shown && !want) shown.remove();
      if (!shown && want) {
        var form = forms.content.querySelector('form[data-action="' + action + '"]');
        if (form) commands.appendChild(form.cloneNode(true));
      }
    });
  }

  function push(list, p) {
    list.push(p);
    if (list.length > MAX_POINTS) list.shift();
  }

  function onSample(d) {
    var seg = d.attempt_id;
    labels[seg] = d.step;
    if (d.iops !== null) push(series.iops, { t: d.t, v: d.iops, seg: seg });
    if (d.lat_mean_us !== null) push(series.mean, { t: d.t, v: d.lat_mean_us, seg: seg });
    if (d.lat_p99_us !== null) push(series.p99, { t: d.t, v: d.lat_p99_us, seg: seg });
    text('live-step', d.step + (d.round ? ' round ' + d.round : '') + ' · ' + d.elapsed_s.toFixed(0) + ' / ' +
         d.expected_s.toFixed(0) + ' s');
    text('now-iops', d.iops === null ? '' : fmt(d.iops) + ' ' + d.unit + (d.bw_mbs === null ? '' : ' · ' +
         d.bw_mbs.toFixed(1) + ' MB/s'));
    text('now-lat', d.lat_mean_us === null ? '' : fmt(d.lat_mean_us) + ' / ' +
         (d.lat_p99_us === null ? '-' : fmt(d.lat_p99_us)));
    var note = document.getElementById('live-note');
    if (note) note.hidden = true;
    redraw();
  }

  function onEnd(d) {
    source.close();
    setState(document.getElementById('run-state'), d.state);
    setActions(d.actions || []);
    eta(null);
    var report = document.getElementById('report');
    if (report && !document.getElementById('report-frame')) {
      var frame = document.createElement('iframe');
      frame.id = 'report-frame';
      frame.setAttribute('sandbox', '');
      frame.title = 'report of run ' + main.dataset.run;
      frame.src = report.dataset.src;
      report.appendChild(frame);
      report.hidden = false;
    }
  }

  var source = new EventSource('/api/runs/' + encodeURIComponent(main.dataset.run) + '/live');
  source.addEventListener('status', function (e) { onStatus(JSON.parse(e.data)); });
  source.addEventListener('sample', function (e) { onSample(JSON.parse(e.data)); });
  source.addEventListener('end', function (e) { onEnd(JSON.parse(e.data)); });
  window.addEventListener('resize', redraw);
})();
