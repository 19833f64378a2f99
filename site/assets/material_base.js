// Material for MkDocs' inline script from partials/javascripts/base.html (9.8.1), as a file so the
// Content-Security-Policy needs no 'unsafe-inline' (site/overrides/). The one change: the scope,
// the site root, is this file's parent folder rather than the page's base_url.
__md_scope=new URL("..",document.currentScript.src),__md_hash=e=>[...e].reduce(((e,_)=>(e<<5)-e+_.charCodeAt(0)),0),__md_get=(e,_=localStorage,t=__md_scope)=>JSON.parse(_.getItem(t.pathname+"."+e)),__md_set=(e,_,t=localStorage,a=__md_scope)=>{try{t.setItem(a.pathname+"."+e,JSON.stringify(_))}catch(e){}}
